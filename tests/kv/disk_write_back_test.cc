// Host -> disk writes on the I/O thread (DiskIoThread, KvCacheManager::StartDiskWriteBack):
// the writer itself; then engine runs under host and disk pressure whose tokens must equal
// an unlimited-memory run's while the disk is fast, slow, failing or full, with the KV
// invariants checked after every step; and the point of it all: host evictions find their
// block already on disk instead of writing it on the stepping thread.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kv/disk_io_thread.h"
#include "kv/disk_store_fixture.h"
#include "kv/slow_file_io.h"
#include "kv/tier_test_util.h"
#include "storage/disk_block_store.h"
#include "testing/fake_file_io.h"

namespace kvtier {
namespace {

using testing::BlockKey;
using testing::BlockTokens;

using testing::Get;
using testing::MakeEngine;
using testing::Prompt;
using testing::Reference;
using testing::RunAll;

// ---------------------------------------------------------------- DiskIoThread

std::unique_ptr<DiskBlockStore> OpenStore(FakeFileIo* io, size_t block_bytes, int64_t slots) {
  return testing::OpenFakeStore(io, "/fake/writer.kv", block_bytes, slots);
}

TEST(DiskIoThreadTest, WritesInOrderAndReportsEachResult) {
  FakeFileIo io;
  constexpr size_t kBytes = 512;
  auto store = OpenStore(&io, kBytes, 16);
  std::vector<std::vector<uint8_t>> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(std::vector<uint8_t>(kBytes, static_cast<uint8_t>(7 * i + 1)));
  DiskIoThread writer(store.get());
  std::vector<int64_t> jobs;
  for (int i = 0; i < 12; ++i) {
    jobs.push_back(writer.SubmitWrite(i, BlockKey(1000 + i), BlockTokens(i), blocks[i].data(), DiskBlockStore::Content::kCached));
  }
  writer.Wait(jobs[3]);  // the first four at least are done
  std::vector<DiskIoThread::Finished> done = writer.TakeFinished();
  ASSERT_GE(done.size(), 4u);
  writer.WaitAll();
  for (DiskIoThread::Finished& f : writer.TakeFinished()) done.push_back(std::move(f));
  ASSERT_EQ(done.size(), 12u);
  for (size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(done[i].job, jobs[i]);
    EXPECT_TRUE(done[i].status.ok()) << done[i].status;
    std::vector<uint8_t> back(kBytes);
    ASSERT_TRUE(store->Read(static_cast<int64_t>(i), BlockKey(1000 + i), BlockTokens(static_cast<int32_t>(i)), back.data()).ok());
    EXPECT_EQ(back, blocks[i]);
  }
  // Faults are consumed by the I/O thread's writes, in submission order.
  io.FailNextWrites(2);
  const int64_t a = writer.SubmitWrite(12, BlockKey(1), BlockTokens(1), blocks[0].data(), DiskBlockStore::Content::kCached);
  const int64_t b = writer.SubmitWrite(13, BlockKey(2), BlockTokens(2), blocks[1].data(), DiskBlockStore::Content::kCached);
  const int64_t c = writer.SubmitWrite(14, BlockKey(3), BlockTokens(3), blocks[2].data(), DiskBlockStore::Content::kCached);
  writer.Wait(c);
  done = writer.TakeFinished();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].job, a);
  EXPECT_FALSE(done[0].status.ok());
  EXPECT_EQ(done[1].job, b);
  EXPECT_FALSE(done[1].status.ok());
  EXPECT_EQ(done[2].job, c);
  EXPECT_TRUE(done[2].status.ok()) << done[2].status;
}

// Cached writes are journaled by the writer as they land: a store reopened after the
// writer stopped (nothing saved on the way out) finds them; private (swap) writes it does not.
TEST(DiskIoThreadTest, CachedWritesAreJournaled) {
  FakeFileIo io;
  constexpr size_t kBytes = 256;
  std::vector<uint8_t> block(kBytes, 0x33);
  {
    auto store = OpenStore(&io, kBytes, 8);
    DiskIoThread writer(store.get());
    writer.SubmitWrite(2, BlockKey(70), BlockTokens(70), block.data(), DiskBlockStore::Content::kCached);
    writer.SubmitWrite(5, BlockKey(71), BlockTokens(71), block.data(), DiskBlockStore::Content::kCached);
    writer.SubmitWrite(6, BlockKey(72), {}, block.data(), DiskBlockStore::Content::kPrivate);
    writer.WaitAll();
    const std::vector<DiskIoThread::Finished> done = writer.TakeFinished();
    ASSERT_EQ(done.size(), 3u);
    for (const DiskIoThread::Finished& f : done) EXPECT_TRUE(f.status.ok()) << f.status;
  }
  auto reopened = OpenStore(&io, kBytes, 8);
  ASSERT_NE(reopened, nullptr);
  ASSERT_EQ(reopened->recovered_entries().size(), 2u) << reopened->index_ignored_reason();
  EXPECT_EQ(reopened->recovered_entries()[1].key, BlockKey(71));
}

TEST(DiskIoThreadTest, DestructionRunsQueuedJobs) {
  FakeFileIo io;
  constexpr size_t kBytes = 256;
  auto store = OpenStore(&io, kBytes, 8);
  std::vector<uint8_t> block(kBytes, 0x5a);
  {
    DiskIoThread writer(store.get());
    for (int i = 0; i < 8; ++i) {
      writer.SubmitWrite(i, BlockKey(50 + i), BlockTokens(i), block.data(), DiskBlockStore::Content::kCached);
    }
  }
  std::vector<uint8_t> back(kBytes);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(store->Read(i, BlockKey(50 + i), BlockTokens(i), back.data()).ok()) << i;
}

// ---------------------------------------------------------------- engine runs

// W5 in miniature: 48 sequences of 80 tokens (20 blocks each, ~960 cached blocks made),
// device tier for ~3 of them, host 256 blocks, disk 1024: the host tier churns, so most of
// its evictions go to disk.
std::vector<std::vector<int32_t>> ChurnPrompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 48; ++i) prompts.push_back(Prompt(3000 + i, 64));
  return prompts;
}

EngineOptions ChurnOptions(FileIo* io, bool write_behind = true) {
  EngineOptions o = testing::TierOptions(/*gpu=*/64, /*host=*/256, /*disk=*/1024, "/fake/churn.kv");
  o.file_io = io;
  o.max_tokens_per_step = 128;
  o.preemption = PreemptionMode::kAuto;
  o.disk_write_behind = write_behind;
  return o;
}


// One line of the host -> disk counters, for the log (timings vary with the machine).
void LogWriteBack(const char* what, const nlohmann::json& s) {
  std::printf("%s: host demoted %lld, on disk %lld, written at eviction %lld, written back %lld, waits %lld (%.4f s), "
              "io_errors %lld, blocks dropped %lld\n",
              what, static_cast<long long>(s["tiers"]["host"]["demoted_blocks"].get<int64_t>()),
              static_cast<long long>(Get(s, "host_evictions_on_disk")),
              static_cast<long long>(Get(s, "host_evictions_written")),
              static_cast<long long>(Get(s, "disk_blocks_written_back")),
              static_cast<long long>(Get(s, "disk_write_waits")), s["time"]["disk_write_wait_seconds"].get<double>(),
              static_cast<long long>(Get(s, "io_errors")), static_cast<long long>(Get(s, "blocks_dropped")));
}

TEST(DiskWriteBackTest, HostEvictionsFindTheirBlocksOnDisk) {
  auto prompts = ChurnPrompts();
  auto expected = Reference(prompts, 16);
  FakeFileIo io;
  // Without write-behind (which puts blocks on disk before they reach the host tier at all).
  auto engine = MakeEngine(ChurnOptions(&io, /*write_behind=*/false));
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(RunAll(*engine, prompts, 16), expected);
  nlohmann::json s = engine->Stats();
  LogWriteBack("HostEvictionsFindTheirBlocksOnDisk", s);
  const int64_t on_disk = Get(s, "host_evictions_on_disk");
  const int64_t written = Get(s, "host_evictions_written");
  EXPECT_GT(Get(s, "disk_blocks_written_back"), 0) << s.dump();
  EXPECT_GT(on_disk, 0) << s.dump();
  EXPECT_LE(on_disk + written, s["tiers"]["host"]["demoted_blocks"].get<int64_t>()) << s.dump();
  // The stepping thread neither writes nor waits, but for a few: writes were queued a step
  // ahead and an in-memory disk finishes them within microseconds. (Measured: see report.)
  EXPECT_LE(written * 10, on_disk) << s.dump();
  EXPECT_LE(Get(s, "disk_write_waits") * 10, on_disk) << s.dump();
  EXPECT_EQ(Get(s, "io_errors"), 0) << s.dump();
}

TEST(DiskWriteBackTest, SlowDiskIsExactAndCountsWaits) {
  auto prompts = ChurnPrompts();
  auto expected = Reference(prompts, 16);
  FakeFileIo fake;
  testing::SlowFileIo io(&fake, std::chrono::microseconds(1500), std::chrono::microseconds(0));
  auto engine = MakeEngine(ChurnOptions(&io));
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(RunAll(*engine, prompts, 16), expected);  // invariants checked every step
  nlohmann::json s = engine->Stats();
  LogWriteBack("SlowDiskIsExactAndCountsWaits", s);
  EXPECT_GT(Get(s, "disk_blocks_written_back"), 0) << s.dump();
  EXPECT_EQ(Get(s, "io_errors"), 0) << s.dump();
  if (Get(s, "disk_write_waits") > 0) {
    EXPECT_GT(s["time"]["disk_write_wait_seconds"].get<double>(), 0) << s.dump();
  }
}

TEST(DiskWriteBackTest, FailingAndFullDiskNeverCorruptOutput) {
  auto prompts = ChurnPrompts();
  auto expected = Reference(prompts, 16);
  FakeFileIo fake;
  testing::SlowFileIo io(&fake, std::chrono::microseconds(200), std::chrono::microseconds(0));  // keep some writes in flight
  auto engine = MakeEngine(ChurnOptions(&io));
  ASSERT_NE(engine, nullptr);
  const auto got = RunAll(*engine, prompts, 16, [&](int step) {
    switch (step % 10) {
      case 1: fake.FailNextWrites(3); break;
      case 3: fake.FailNextSyncs(2); break;
      case 5: fake.set_capacity_bytes(fake.used_bytes() - 1); break;  // full: every write fails
      case 7: fake.set_capacity_bytes(std::nullopt); break;
      case 8: fake.FailNextReads(1); break;
      default: break;
    }
  });
  fake.set_capacity_bytes(std::nullopt);
  EXPECT_EQ(got, expected);
  nlohmann::json s = engine->Stats();
  LogWriteBack("FailingAndFullDiskNeverCorruptOutput", s);
  EXPECT_GT(Get(s, "io_errors"), 0) << s.dump();
  EXPECT_GT(Get(s, "disk_blocks_written_back"), 0) << s.dump();
}

// Evictions from a full host tier whose write-back did not happen (paused after a failed
// write) write their block at eviction: on the writer thread, which the stepping thread
// waits for. No block payload is read or written, and no index record written, on the
// stepping thread while it steps.
TEST(DiskWriteBackTest, EvictionWritesRunOnTheWriterThread) {
  auto prompts = ChurnPrompts();
  auto expected = Reference(prompts, 16);
  FakeFileIo fake;
  testing::SlowFileIo io(&fake, std::chrono::microseconds(0), std::chrono::microseconds(0));
  // Without write-behind, which would have put most blocks on disk before their eviction.
  auto engine = MakeEngine(ChurnOptions(&io, /*write_behind=*/false));
  ASSERT_NE(engine, nullptr);
  io.Watch(std::this_thread::get_id());  // from the first step on (opening writes the index)
  EXPECT_EQ(RunAll(*engine, prompts, 16,
                   [&](int step) {
                     if (step % 10 == 1) fake.FailNextWrites(1);  // pauses the write-back a while
                   }),
            expected);
  nlohmann::json s = engine->Stats();
  LogWriteBack("EvictionWritesRunOnTheWriterThread", s);
  EXPECT_GT(Get(s, "host_evictions_written"), 0) << s.dump();
  EXPECT_GT(Get(s, "io_errors"), 0) << s.dump();
  EXPECT_EQ(io.payload_io_on_watched_thread(), 0) << s.dump();
  EXPECT_EQ(io.index_writes_on_watched_thread(), 0) << s.dump();  // the journal: writer thread too
}

// Destroying the context lands the writes in flight and persists them: a second context
// over the same file finds the prefix on disk.
TEST(DiskWriteBackTest, WritesInFlightAtShutdownArePersisted) {
  const std::vector<int32_t> shared = Prompt(77, 32);  // eight full blocks
  std::vector<std::vector<int32_t>> later = {Prompt(78, 3, shared)};
  auto expected = Reference(later, 4);
  FakeFileIo fake;
  testing::SlowFileIo io(&fake, std::chrono::microseconds(500), std::chrono::microseconds(0));
  {
    EngineOptions o = testing::TierOptions(/*gpu=*/16, /*host=*/12, /*disk=*/256, "/fake/persist.kv");
    o.file_io = &io;
    auto engine = MakeEngine(o);
    ASSERT_NE(engine, nullptr);
    RunAll(*engine, {Prompt(79, 3, shared)}, 4);
    for (int i = 0; i < 6; ++i) RunAll(*engine, {Prompt(80 + i, 30)}, 2);  // push it to host, then disk
  }
  EngineOptions o = testing::TierOptions(/*gpu=*/16, /*host=*/12, /*disk=*/256, "/fake/persist.kv");
  o.file_io = &io;
  auto engine = MakeEngine(o);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(RunAll(*engine, later, 4), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["prefix_hits"]["disk"].get<int64_t>(), 0) << s.dump();
}

}  // namespace
}  // namespace kvtier
