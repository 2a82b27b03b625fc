// Prefix entries of layer groups on the host and disk tiers (KvCacheOptions::layer_groups
// with the prefix cache and a tier below): a group's entry the device evicts is copied
// down under its group's key, counted as one block of one group's layers there; a later
// match loads it back where the next query reads it, to the bytes it had; and a corrupt
// disk copy is detected, dropped and its positions computed again.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv/kv_cache_manager.h"
#include "storage/disk_block_store.h"
#include "testing/fake_backend.h"
#include "testing/fake_file_io.h"

namespace kvtier {
namespace {

constexpr int64_t kTierBlockTokens = 4;
constexpr int64_t kTierDeviceBlocks = 15;
const char kTierDiskPath[] = "/fake/grouped-prefix.kv";

// A full-attention layer and a layer of window 4 (two groups of one layer), the prefix
// cache on, a host and/or disk tier below.
struct GroupedPrefixTiers {
  GroupedPrefixTiers(int64_t host_blocks, int64_t disk_blocks) : backend(kTierBlockTokens) {
    EXPECT_TRUE(backend.AllocateKvPool(kTierDeviceBlocks).ok());
    const std::vector<std::optional<int64_t>> windows = {std::nullopt, 4};
    absl::StatusOr<KvLayerGroups> groups = KvLayerGroups::Create(windows, kTierBlockTokens, /*grouped=*/true);
    EXPECT_TRUE(groups.ok()) << groups.status();
    KvCacheOptions options;
    options.block_tokens = kTierBlockTokens;
    options.device_blocks = kTierDeviceBlocks;
    options.host_blocks = host_blocks;
    options.disk_blocks = disk_blocks;
    options.disk_path = kTierDiskPath;
    options.file_io = &io;
    options.model_fingerprint = 42;
    options.prefix_cache = true;
    options.preparation.probe_disk_read_speed = false;
    options.layer_groups = *std::move(groups);
    absl::StatusOr<std::unique_ptr<KvCacheManager>> created = KvCacheManager::Create(options, &backend);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) kv = *std::move(created);
  }
  const GroupedBlockTables& tables() const { return *kv->grouped(); }
  static uint8_t Byte(int64_t g, int64_t block) { return static_cast<uint8_t>(1 + g * 16 + block); }
  // Whether blocks [first, end) of group g's table hold the bytes Compute gave them.
  bool Holds(SequenceId seq, int64_t g, int64_t first, int64_t end) {
    const GroupBlockTable& t = tables().Table(seq, g);
    if (first < t.first_block || end > t.first_block + static_cast<int64_t>(t.blocks.size())) return false;
    for (int64_t b = first; b < end; ++b) {
      const uint8_t* p = backend.Block(t.blocks[static_cast<size_t>(b - t.first_block)]);
      for (size_t i = 0; i < kv->block_bytes(); ++i) {
        if (p[i] != Byte(g, b)) return false;
      }
    }
    return true;
  }
  int64_t hits(Tier tier) const { return kv->counters().prefix_hits[static_cast<int>(tier)]; }

  FakeFileIo io;
  testing::FakeBackend backend;
  std::unique_ptr<KvCacheManager> kv;
};

std::vector<int32_t> TierPrefixTokens(int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(200 + i);
  return out;
}

// Sequence 1 computes [0, 24) (6 blocks a group, each block's bytes its own), all made
// entries before the window group drops its blocks 0..4, and is released. Another sequence
// then takes 8 blocks: the 3 free ones and the window group's entries 0..4, the least
// recently released, which go down to the tiers below.
constexpr int64_t kEvicted = 5;

void ComputeThenEvictTheWindowEntries(GroupedPrefixTiers& f) {
  const std::vector<int32_t> tokens = TierPrefixTokens(24);
  ASSERT_TRUE(f.kv->Reserve(1, 24).ok());
  for (int64_t g = 0; g < 2; ++g) {
    for (int64_t b = 0; b < 6; ++b) {
      std::memset(f.backend.Block(f.tables().Table(1, g).blocks[static_cast<size_t>(b)]), GroupedPrefixTiers::Byte(g, b),
                  f.kv->block_bytes());
    }
  }
  f.kv->OnComputed(1, tokens, 24);
  f.kv->Release(1);
  ASSERT_TRUE(f.kv->Reserve(9, 16).ok());
  for (int64_t g = 0; g < 2; ++g) {  // written over, as a forward would
    for (BlockId block : f.tables().Table(9, g).blocks) std::memset(f.backend.Block(block), 0xee, f.kv->block_bytes());
  }
  f.kv->Release(9);  // nothing computed: nothing cached
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  const KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.layer_groups.cached_blocks, 12 - kEvicted);
  EXPECT_EQ(stats.counters.blocks_demoted[static_cast<int>(Tier::kDevice)], kEvicted);
  EXPECT_EQ(stats.counters.blocks_dropped, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// 21 tokens: 5 blocks, whose next query (at 20) reads blocks 0..4 of the full group and
// block 4 of the window (17..19), on the tier below; 13 tokens: 3 blocks, and window block 2.
void ExpectHitsFrom(GroupedPrefixTiers& f, Tier below) {
  EXPECT_EQ(f.kv->MatchPrefix(2, TierPrefixTokens(21)), 20);
  EXPECT_EQ(f.tables().Table(2, 1).first_block, 4);
  EXPECT_EQ(f.tables().Table(2, 1).blocks.size(), 1u);
  EXPECT_TRUE(f.Holds(2, 0, 0, 5));
  EXPECT_TRUE(f.Holds(2, 1, 4, 5)) << "the window block came back with its bytes";
  EXPECT_EQ(f.hits(Tier::kDevice), 4);
  EXPECT_EQ(f.hits(below), 1);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  EXPECT_EQ(f.kv->MatchPrefix(3, TierPrefixTokens(13)), 12);
  EXPECT_EQ(f.tables().Table(3, 1).first_block, 2);
  EXPECT_TRUE(f.Holds(3, 1, 2, 3));
  EXPECT_EQ(f.tables().Table(3, 0).blocks[0], f.tables().Table(2, 0).blocks[0]) << "shared";
  EXPECT_EQ(f.hits(below), 2);
  f.kv->UnmatchPrefix(3);
  EXPECT_EQ(f.hits(below), 1);
  EXPECT_EQ(f.hits(Tier::kDevice), 4);
  // Going on from the match: computed and dropped as any sequence.
  ASSERT_TRUE(f.kv->Reserve(2, 28).ok());
  f.kv->OnComputed(2, TierPrefixTokens(28), 28);
  EXPECT_EQ(f.tables().Table(2, 1).first_block, (28 - 4 + 1) / kTierBlockTokens);
  f.kv->Release(2);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(GroupedPrefixTiersTest, EvictedGroupEntriesHitOnTheHost) {
  GroupedPrefixTiers f(/*host_blocks=*/8, /*disk_blocks=*/0);
  ASSERT_NE(f.kv, nullptr);
  ComputeThenEvictTheWindowEntries(f);
  const KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.tier(Tier::kHost).cached_blocks, kEvicted);
  EXPECT_EQ(stats.tier(Tier::kHost).used_blocks, 0) << "cached, held by no sequence";
  EXPECT_EQ(f.kv->block_bytes(), f.backend.kv_layout().BlockBytes()) << "a block of one group's layers";
  ExpectHitsFrom(f, Tier::kHost);
}

TEST(GroupedPrefixTiersTest, EvictedGroupEntriesHitOnDisk) {
  GroupedPrefixTiers f(/*host_blocks=*/0, /*disk_blocks=*/8);
  ASSERT_NE(f.kv, nullptr);
  ComputeThenEvictTheWindowEntries(f);
  const KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.tier(Tier::kDisk).cached_blocks, kEvicted);
  EXPECT_EQ(stats.disk_store.bytes_written, static_cast<int64_t>(kEvicted * f.kv->block_bytes()));
  ExpectHitsFrom(f, Tier::kDisk);
  EXPECT_EQ(f.kv->Stats().disk_store.bytes_read, static_cast<int64_t>(2 * f.kv->block_bytes()));
}

TEST(GroupedPrefixTiersTest, HostVictimsGoOnToDisk) {
  // Two host slots: the host's least recently used group entries move on to disk.
  GroupedPrefixTiers f(/*host_blocks=*/2, /*disk_blocks=*/8);
  ASSERT_NE(f.kv, nullptr);
  ComputeThenEvictTheWindowEntries(f);
  const KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.tier(Tier::kHost).cached_blocks + stats.tier(Tier::kDisk).cached_blocks, kEvicted);
  EXPECT_EQ(stats.tier(Tier::kHost).cached_blocks, 2);
  EXPECT_EQ(f.kv->MatchPrefix(2, TierPrefixTokens(21)), 20);
  EXPECT_TRUE(f.Holds(2, 1, 4, 5));
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(GroupedPrefixTiersTest, CorruptDiskEntryIsDetectedAndComputedAgain) {
  GroupedPrefixTiers f(/*host_blocks=*/0, /*disk_blocks=*/8);
  ASSERT_NE(f.kv, nullptr);
  ComputeThenEvictTheWindowEntries(f);
  // One bit of every written slot's payload.
  const int64_t slot_bytes = DiskBlockStore::SlotBytes(f.kv->block_bytes(), kTierBlockTokens);
  const int64_t payload = static_cast<int64_t>(SlotHeaderBytes(kTierBlockTokens));
  for (int32_t slot = 0; slot < kEvicted; ++slot) {
    ASSERT_TRUE(f.io.FlipBit(kTierDiskPath, slot * slot_bytes + payload + 3, 2).ok());
  }
  // The window block the next query at 20 reads is corrupt: no shorter prefix has its
  // window on the device either, so the prompt is computed from the start.
  EXPECT_EQ(f.kv->MatchPrefix(2, TierPrefixTokens(21)), 0);
  KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.counters.corrupt_blocks_detected, 1);
  EXPECT_EQ(stats.tier(Tier::kDisk).cached_blocks, kEvicted - 1) << "the corrupt copy is forgotten";
  EXPECT_EQ(f.hits(Tier::kDisk), 0);
  EXPECT_TRUE(f.tables().Table(2, 0).blocks.empty());
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  // Computed again, it becomes an entry again, on the device.
  ASSERT_TRUE(f.kv->Reserve(2, 24).ok());
  f.kv->OnComputed(2, TierPrefixTokens(24), 24);
  f.kv->Release(2);
  EXPECT_EQ(f.kv->MatchPrefix(3, TierPrefixTokens(21)), 20);
  EXPECT_EQ(f.hits(Tier::kDisk), 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

}  // namespace
}  // namespace kvtier
