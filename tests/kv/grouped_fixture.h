// A KvCacheManager over a fake backend whose KV is kept in layer groups — a full-attention
// layer and a layer of window 4, one layer a group — with host and disk tiers of the sizes
// given (the disk in memory) and a remote tier when given a url, and helpers that stamp a
// sequence's group blocks with a pattern and check it back. For the kv tests of grouped
// swaps (grouped_swap_test.cc) and grouped prefix entries on the tiers below
// (grouped_prefix_tiers_test.cc, grouped_remote_test.cc). Not thread-safe.
#ifndef KVTIER_TESTS_KV_GROUPED_FIXTURE_H_
#define KVTIER_TESTS_KV_GROUPED_FIXTURE_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv/kv_cache_manager.h"
#include "testing/fake_backend.h"
#include "testing/fake_file_io.h"

namespace kvtier::testing {

inline constexpr int64_t kGroupedBlockTokens = 4;
inline constexpr int64_t kGroupedWindow = 4;
inline constexpr char kGroupedDiskPath[] = "/fake/grouped.kv";

struct GroupedFixture {
  GroupedFixture(int64_t device_blocks, int64_t host_blocks, int64_t disk_blocks, bool prefix_cache,
                 const std::string& remote_url = "")
      : backend(kGroupedBlockTokens) {
    EXPECT_TRUE(backend.AllocateKvPool(device_blocks).ok());
    const std::vector<std::optional<int64_t>> windows = {std::nullopt, kGroupedWindow};
    absl::StatusOr<KvLayerGroups> groups = KvLayerGroups::Create(windows, kGroupedBlockTokens, /*grouped=*/true);
    EXPECT_TRUE(groups.ok()) << groups.status();
    KvCacheOptions options;
    options.block_tokens = kGroupedBlockTokens;
    options.device_blocks = device_blocks;
    options.host_blocks = host_blocks;
    options.disk_blocks = disk_blocks;
    options.disk_path = kGroupedDiskPath;
    options.file_io = &io;
    options.model_fingerprint = 42;
    options.prefix_cache = prefix_cache;
    options.preparation.probe_disk_read_speed = false;
    options.layer_groups = *std::move(groups);
    options.remote.url = remote_url;
    options.remote.timeout_ms = 500;  // generous: CI machines are shared (sanitizer builds are slow)
    options.remote.retry_ms = 100;
    absl::StatusOr<std::unique_ptr<KvCacheManager>> created = KvCacheManager::Create(options, &backend);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) kv = *std::move(created);
    kv_options = options;
  }
  // Frees the manager (its disk index persisted) and creates it again over the same disk
  // file and device pool: a restart.
  void Reopen() {
    kv.reset();
    absl::StatusOr<std::unique_ptr<KvCacheManager>> created = KvCacheManager::Create(kv_options, &backend);
    ASSERT_TRUE(created.ok()) << created.status();
    kv = *std::move(created);
  }
  const GroupedBlockTables& tables() const { return *kv->grouped(); }
  // Fills every block group g holds for the sequence with a byte of (pattern, g, logical block).
  void Stamp(SequenceId seq, int pattern) {
    for (int64_t g = 0; g < 2; ++g) {
      const GroupBlockTable& t = tables().Table(seq, g);
      for (size_t i = 0; i < t.blocks.size(); ++i) {
        std::memset(backend.Block(t.blocks[i]), Byte(pattern, g, t.first_block + static_cast<int64_t>(i)),
                    kv->block_bytes());
      }
    }
  }
  // Whether blocks [first, end) of group g's table hold Stamp's bytes.
  bool Holds(SequenceId seq, int pattern, int64_t g, int64_t first, int64_t end) {
    const GroupBlockTable& t = tables().Table(seq, g);
    if (first < t.first_block || end > t.first_block + static_cast<int64_t>(t.blocks.size())) return false;
    for (int64_t b = first; b < end; ++b) {
      const uint8_t* p = backend.Block(t.blocks[static_cast<size_t>(b - t.first_block)]);
      for (size_t i = 0; i < kv->block_bytes(); ++i) {
        if (p[i] != Byte(pattern, g, b)) return false;
      }
    }
    return true;
  }
  static uint8_t Byte(int pattern, int64_t g, int64_t block) {
    return static_cast<uint8_t>((pattern * 31 + g * 17 + block) & 0xff);
  }

  FakeFileIo io;
  FakeBackend backend;
  KvCacheOptions kv_options;
  std::unique_ptr<KvCacheManager> kv;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_GROUPED_FIXTURE_H_
