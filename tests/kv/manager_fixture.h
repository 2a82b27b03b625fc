// A KvCacheManager over a fake backend and an in-memory disk (optionally slow, see
// slow_file_io.h), with helpers that stamp a sequence's device blocks with a pattern and
// check it back. For the manager-level tests (kv_cache_manager_test.cc,
// disk_staging_test.cc). Not thread-safe.
#ifndef KVTIER_TESTS_KV_MANAGER_FIXTURE_H_
#define KVTIER_TESTS_KV_MANAGER_FIXTURE_H_

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

#include "gtest/gtest.h"
#include "kv/kv_cache_manager.h"
#include "kv/slow_file_io.h"
#include "storage/disk_block_store.h"
#include "testing/fake_file_io.h"
#include "testing/fake_backend.h"

namespace kvtier::testing {

struct ManagerFixture {
  // A disk delay (write or read, per block payload) puts SlowFileIo in front of the fake disk.
  ManagerFixture(int64_t device, int64_t host, int64_t disk, int64_t block_tokens = 4,
                 std::chrono::microseconds write_delay = {}, std::chrono::microseconds read_delay = {})
      : backend(block_tokens), slow(&io, write_delay, read_delay) {
    EXPECT_TRUE(backend.AllocateKvPool(device).ok());
    KvCacheOptions options;
    options.block_tokens = block_tokens;
    options.device_blocks = device;
    options.host_blocks = host;
    options.disk_blocks = disk;
    options.disk_path = "/fake/kv";
    options.file_io = write_delay.count() > 0 || read_delay.count() > 0 ? static_cast<FileIo*>(&slow) : &io;
    options.model_fingerprint = 42;
    // Deterministic plans: the guessed disk speed until a test's own reads are measured.
    options.preparation.probe_disk_read_speed = false;
    auto created = KvCacheManager::Create(options, &backend);
    EXPECT_TRUE(created.ok()) << created.status();
    kv = std::move(*created);
    kv_options = options;
  }
  // Frees the manager (what it caches is persisted on disk) and creates it again over the
  // same disk file and device pool: a restart.
  void Reopen() {
    kv.reset();
    auto created = KvCacheManager::Create(kv_options, &backend);
    ASSERT_TRUE(created.ok()) << created.status();
    kv = std::move(*created);
  }
  // Fills the sequence's device blocks with a pattern derived from (pattern, block index);
  // the pattern is the sequence id unless given.
  void Stamp(SequenceId seq, int64_t pattern = -1) {
    if (pattern < 0) pattern = seq;
    auto table = kv->BlockTable(seq);
    for (size_t i = 0; i < table.size(); ++i) {
      std::memset(backend.Block(table[i]), static_cast<int>((pattern * 31 + static_cast<int64_t>(i)) & 0xff),
                  backend.kv_layout().BlockBytes());
    }
  }
  // Whether every device block of the sequence holds Stamp's pattern.
  bool Check(SequenceId seq, int64_t pattern = -1) {
    if (pattern < 0) pattern = seq;
    auto table = kv->BlockTable(seq);
    for (size_t i = 0; i < table.size(); ++i) {
      const uint8_t want = static_cast<uint8_t>((pattern * 31 + static_cast<int64_t>(i)) & 0xff);
      const uint8_t* p = backend.Block(table[i]);
      for (size_t b = 0; b < backend.kv_layout().BlockBytes(); ++b) {
        if (p[b] != want) return false;
      }
    }
    return true;
  }
  // Byte offset of disk slot `slot`'s block payload in the disk file (DiskBlockStore layout).
  int64_t DiskPayloadOffset(int32_t slot) const {
    const int64_t block_tokens = kv->block_tokens();
    return slot * DiskBlockStore::SlotBytes(kv->block_bytes(), block_tokens) +
           static_cast<int64_t>(SlotHeaderBytes(block_tokens));
  }
  FakeFileIo io;
  FakeBackend backend;
  SlowFileIo slow;
  std::unique_ptr<KvCacheManager> kv;
  KvCacheOptions kv_options;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_MANAGER_FIXTURE_H_
