// Device <-> disk through staging buffers and the KV manager's disk I/O threads: device
// victims the host tier cannot take are written to disk by the writer thread
// (disk_demote_writes), and disk blocks nobody read ahead are read at their use (prefix
// match, swap-in) by the reader thread, all of a call at once (disk_staged_reads). First at
// the manager over a fake backend (exact bytes, failed writes, corrupt slots, writes in
// flight), then engine runs without a host tier whose tokens must equal an unlimited-memory
// run's. Nothing here asserts on timing: a slow disk only widens the in-flight window, and
// every check holds whether a write has landed or not.
#include <chrono>
#include <cstdio>
#include <map>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kv/disk_tier.h"
#include "kv/manager_fixture.h"
#include "kv/slow_file_io.h"
#include "kv/tier_test_util.h"
#include "testing/fake_file_io.h"
#include "testing/wait_until.h"

namespace kvtier {
namespace {

using Fixture = testing::ManagerFixture;
using testing::Get;
using testing::MakeEngine;
using testing::Prompt;
using testing::Reference;
using testing::RunAll;

// `blocks` full blocks of distinct tokens (seeded) plus one more token, so MatchPrefix may
// cover all the full blocks.
std::vector<int32_t> Tokens(int seed, int64_t blocks) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < blocks * 4 + 1; ++i) t.push_back(static_cast<int32_t>(seed * 1000 + i));
  return t;
}

// Sequence `seq` computes `tokens`' full blocks, stamped with its pattern, and leaves them
// cached on the device.
void CacheOnDevice(Fixture& f, SequenceId seq, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
  ASSERT_TRUE(f.kv->Reserve(seq, n).ok());
  f.Stamp(seq);
  f.kv->OnComputed(seq, tokens, n);
  f.kv->Release(seq);
}

// ---------------------------------------------------------------- manager

TEST(DiskStagingTest, DeviceVictimsGoToDiskThroughTheWriterAndComeBackExact) {
  // More victims (20) than staging buffers (16): a batch ends, the next waits for a write.
  Fixture f(/*device=*/20, /*host=*/0, /*disk=*/64);
  const std::vector<int32_t> a = Tokens(1, 20);
  ASSERT_NO_FATAL_FAILURE(CacheOnDevice(f, 1, a));
  ASSERT_TRUE(f.kv->Reserve(2, 80).ok());  // evicts all 20
  f.Stamp(2);                              // overwrites them
  EXPECT_EQ(f.kv->counters().evictions_copied, 20);
  EXPECT_EQ(f.kv->transfers().num_in_flight(Lane::kDiskWrite) + f.kv->counters().disk.demote_writes, 20);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  f.kv->Release(2);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  EXPECT_EQ(f.kv->counters().disk.demote_writes, 20);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 20);
  EXPECT_EQ(f.kv->counters().blocks_dropped, 0);
  EXPECT_EQ(f.kv->counters().io_errors, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();

  // More disk hits (20) than staging buffers: the oldest read lands to free one.
  EXPECT_EQ(f.kv->MatchPrefix(3, a), 80);
  EXPECT_EQ(f.kv->counters().prefix_hits[static_cast<int>(Tier::kDisk)], 20);
  EXPECT_EQ(f.kv->counters().disk.staged_reads, 20);
  EXPECT_TRUE(f.Check(3, /*pattern=*/1));
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDevice).cached_blocks, 20);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(DiskStagingTest, VictimsGoToDiskWhenTheHostTierIsFull) {
  Fixture f(/*device=*/8, /*host=*/2, /*disk=*/32);
  ASSERT_TRUE(f.kv->Reserve(5, 8).ok());
  f.Stamp(5);
  ASSERT_TRUE(f.kv->SwapOut(5).ok());  // holds both host slots
  const std::vector<int32_t> a = Tokens(1, 4);
  ASSERT_NO_FATAL_FAILURE(CacheOnDevice(f, 1, a));
  ASSERT_TRUE(f.kv->Reserve(2, 32).ok());  // 4 free blocks and the 4 cached ones
  f.Stamp(2);
  f.kv->Release(2);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  EXPECT_EQ(f.kv->counters().disk.demote_writes, 4);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  ASSERT_TRUE(f.kv->SwapIn(5).ok());
  EXPECT_TRUE(f.Check(5));
  EXPECT_EQ(f.kv->MatchPrefix(3, a), 16);
  EXPECT_TRUE(f.Check(3, /*pattern=*/1));
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// A slow disk (20 ms a block) keeps the demote writes in flight while other sequences are
// released and the evicted prefix is matched: the match waits for the writes, then reads the
// blocks back. Holds equally if the writes landed first.
TEST(DiskStagingTest, PrefixMatchAndReleaseWhileDemoteWritesAreInFlight) {
  Fixture f(/*device=*/8, /*host=*/0, /*disk=*/32, /*block_tokens=*/4,
            /*write_delay=*/std::chrono::milliseconds(20));
  const std::vector<int32_t> a = Tokens(1, 4);
  ASSERT_NO_FATAL_FAILURE(CacheOnDevice(f, 1, a));
  ASSERT_TRUE(f.kv->Reserve(9, 8).ok());  // a bystander, on two of the free blocks
  f.Stamp(9);
  ASSERT_TRUE(f.kv->Reserve(2, 24).ok());  // the other two free blocks and the 4 cached ones
  f.Stamp(2);
  EXPECT_EQ(f.kv->transfers().num_in_flight(Lane::kDiskWrite) + f.kv->counters().disk.demote_writes, 4);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  EXPECT_TRUE(f.Check(9));
  f.kv->Release(9);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  f.kv->Release(2);
  EXPECT_EQ(f.kv->MatchPrefix(3, a), 16);
  EXPECT_EQ(f.kv->counters().disk.demote_writes, 4);  // the match waited for every block's write
  EXPECT_EQ(f.kv->counters().prefix_hits[static_cast<int>(Tier::kDisk)], 4);
  EXPECT_TRUE(f.Check(3, /*pattern=*/1));
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(DiskStagingTest, FailedDemoteWriteDropsOnlyThatBlock) {
  Fixture f(/*device=*/8, /*host=*/0, /*disk=*/32);
  const std::vector<int32_t> a = Tokens(1, 2);
  const std::vector<int32_t> b = Tokens(2, 2);
  ASSERT_NO_FATAL_FAILURE(CacheOnDevice(f, 1, a));
  ASSERT_NO_FATAL_FAILURE(CacheOnDevice(f, 2, b));
  ASSERT_TRUE(f.kv->Reserve(9, 12).ok());  // a bystander on 3 of the 4 free blocks
  f.Stamp(9);
  f.io.FailNextWrites(1);  // the first write: a's first block, the least recently used
  ASSERT_TRUE(f.kv->Reserve(3, 20).ok());  // the last free block and the 4 cached ones
  f.Stamp(3);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  EXPECT_EQ(f.kv->counters().io_errors, 1);
  EXPECT_EQ(f.kv->counters().blocks_dropped, 1);
  EXPECT_EQ(f.kv->counters().disk.demote_writes, 3);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 3);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  EXPECT_TRUE(f.Check(9));
  EXPECT_TRUE(f.Check(3));
  f.kv->Release(3);
  EXPECT_EQ(f.kv->MatchPrefix(4, b), 8);
  EXPECT_TRUE(f.Check(4, /*pattern=*/2));
  EXPECT_EQ(f.kv->MatchPrefix(5, a), 0);  // its first block is gone: no prefix
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// Four demoted blocks on disk slots 0..3 (fresh pool, LRU order); slot 2 rots. The match
// reads all four at once, stops the prefix before the corrupt one and forgets its slot; the
// block after it was read fine and stays cached.
TEST(DiskStagingTest, StagedPrefixReadsStopAtACorruptSlot) {
  Fixture f(/*device=*/8, /*host=*/0, /*disk=*/16);
  const std::vector<int32_t> a = Tokens(1, 4);
  ASSERT_NO_FATAL_FAILURE(CacheOnDevice(f, 1, a));
  ASSERT_TRUE(f.kv->Reserve(2, 32).ok());
  f.Stamp(2);
  f.kv->Release(2);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 4);
  ASSERT_TRUE(f.io.FlipBit("/fake/kv", f.DiskPayloadOffset(2) + 5, 1).ok());
  EXPECT_EQ(f.kv->MatchPrefix(3, a), 8);
  EXPECT_TRUE(f.Check(3, /*pattern=*/1));
  EXPECT_EQ(f.kv->counters().corrupt_blocks_detected, 1);
  EXPECT_EQ(f.kv->counters().disk.staged_reads, 3);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 3);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDevice).cached_blocks, 3);  // blocks 0, 1 (held) and 3
  EXPECT_EQ(f.kv->counters().prefix_hits[static_cast<int>(Tier::kDisk)], 2);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  f.kv->Release(3);
  EXPECT_EQ(f.kv->MatchPrefix(4, a), 8);  // device hits now; block 2 is nowhere
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// What the device caches when the manager ends is persisted in the order its blocks became
// full (the write-behind queue), not in the cache map's order (which differs from run to
// run): a prompt's blocks take consecutive slots, so that the next manager's prefix match
// reads the file in order, and counts it.
TEST(DiskStagingTest, BlocksPersistedAtShutdownLieInPromptOrder) {
  constexpr int64_t kBlocks = 24;
  Fixture f(/*device=*/32, /*host=*/0, /*disk=*/64);
  const std::vector<int32_t> a = Tokens(1, kBlocks);
  ASSERT_NO_FATAL_FAILURE(CacheOnDevice(f, 1, a));
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 0);  // nothing written before the end
  f.Reopen();
  std::map<Sha256Digest, int64_t> slot_of;
  for (const DiskIndexEntry& e : f.kv->disk().store()->recovered_entries()) slot_of[e.key] = e.slot;
  ASSERT_EQ(slot_of.size(), static_cast<size_t>(kBlocks));
  BlockKeyChain keys = f.kv->KeyChain("");
  std::vector<int64_t> slots;
  for (int64_t i = 0; i < kBlocks; ++i) slots.push_back(slot_of[keys.Key(a, f.kv->block_tokens(), i).digest]);
  for (int64_t i = 1; i < kBlocks; ++i) EXPECT_EQ(slots[i], slots[i - 1] + 1) << "block " << i;

  EXPECT_EQ(f.kv->MatchPrefix(2, a), kBlocks * 4);
  EXPECT_TRUE(f.Check(2, /*pattern=*/1));
  EXPECT_EQ(f.kv->counters().disk.staged_reads, kBlocks);
  EXPECT_EQ(f.kv->counters().disk.reads_in_file_order, kBlocks - 1);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(DiskStagingTest, StagedSwapInReadsAreExact) {
  // 20 disk blocks: more than the staging buffers, for the swap-out's writes and the reads.
  Fixture f(/*device=*/24, /*host=*/0, /*disk=*/48);
  ASSERT_TRUE(f.kv->Reserve(7, 80).ok());
  f.Stamp(7);
  ASSERT_TRUE(f.kv->SwapOut(7).ok());
  ASSERT_TRUE(f.kv->Reserve(8, 96).ok());  // scribbles over every device block
  f.Stamp(8);
  f.kv->Release(8);
  ASSERT_TRUE(f.kv->SwapIn(7).ok());
  EXPECT_TRUE(f.Check(7));
  EXPECT_EQ(f.kv->counters().disk.staged_reads, 20);
  EXPECT_EQ(f.kv->counters().disk.swap_writes, 20);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(DiskStagingTest, StagedSwapInDetectsOneCorruptSlot) {
  Fixture f(/*device=*/8, /*host=*/0, /*disk=*/16);
  ASSERT_TRUE(f.kv->Reserve(7, 24).ok());  // 6 blocks, to disk slots 0..5 in block order
  f.Stamp(7);
  ASSERT_TRUE(f.kv->SwapOut(7).ok());
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  ASSERT_TRUE(f.io.FlipBit("/fake/kv", f.DiskPayloadOffset(3) + 7, 2).ok());
  const absl::Status s = f.kv->SwapIn(7);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_FALSE(f.kv->IsSwappedOut(7));
  EXPECT_TRUE(f.kv->BlockTable(7).empty());
  EXPECT_EQ(f.kv->counters().corrupt_blocks_detected, 1);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 0);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDevice).used_blocks, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// ---------------------------------------------------------------- engine runs

// A prompt over a 32-token prefix (8 blocks), then five others that push it off the device
// tier (24 blocks); without a host tier the prefix goes to disk. A later prompt over the same
// prefix finds it there.
struct PrefixRun {
  std::vector<int32_t> shared = Prompt(77, 32);
  std::vector<std::vector<int32_t>> first = {Prompt(78, 3, shared)};
  std::vector<std::vector<int32_t>> later = {Prompt(79, 3, shared)};
};

EngineOptions NoHostOptions(FileIo* io) {
  EngineOptions o = testing::TierOptions(/*gpu=*/24, /*host=*/0, /*disk=*/256, "/fake/demote.kv");
  o.file_io = io;
  return o;
}

void LogStaging(const char* what, const nlohmann::json& s) {
  std::printf("%s: demote writes %lld, staged reads %lld, prefix hits gpu/host/disk %lld/%lld/%lld, "
              "write waits %lld, io_errors %lld, blocks dropped %lld\n",
              what, static_cast<long long>(Get(s, "disk_demote_writes")),
              static_cast<long long>(Get(s, "disk_staged_reads")),
              static_cast<long long>(s["prefix_hits"]["gpu"].get<int64_t>()),
              static_cast<long long>(s["prefix_hits"]["host"].get<int64_t>()),
              static_cast<long long>(s["prefix_hits"]["disk"].get<int64_t>()),
              static_cast<long long>(Get(s, "disk_write_waits")), static_cast<long long>(Get(s, "io_errors")),
              static_cast<long long>(Get(s, "blocks_dropped")));
}

void RunPrefixThroughDisk(FileIo* io, const char* what) {
  const PrefixRun run;
  const auto expected_first = Reference(run.first, 4);
  const auto expected_later = Reference(run.later, 4);
  EngineOptions o = NoHostOptions(io);
  o.disk_write_behind = false;  // the blocks reach disk at their eviction (demote writes)
  auto engine = MakeEngine(o);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(RunAll(*engine, run.first, 4), expected_first);  // invariants checked every step
  for (int i = 0; i < 5; ++i) RunAll(*engine, {Prompt(80 + i, 30)}, 2);
  EXPECT_EQ(RunAll(*engine, run.later, 4), expected_later);
  const nlohmann::json s = engine->Stats();
  LogStaging(what, s);
  EXPECT_GT(Get(s, "disk_demote_writes"), 0) << s.dump();
  EXPECT_EQ(s["prefix_hits"]["disk"].get<int64_t>(), 8) << s.dump();
  EXPECT_GE(Get(s, "disk_staged_reads"), 8) << s.dump();
  EXPECT_EQ(Get(s, "io_errors"), 0) << s.dump();
}

// With write-behind the prefix blocks are on disk soon after they fill: their eviction
// writes nothing, and the later prompt reads them back as before.
TEST(DiskStagingEngineTest, WriteBehindPutsBlocksOnDiskBeforeTheirEviction) {
  FakeFileIo io;
  const PrefixRun run;
  const auto expected_first = Reference(run.first, 4);
  const auto expected_later = Reference(run.later, 4);
  auto engine = MakeEngine(NoHostOptions(&io));
  ASSERT_NE(engine, nullptr);
  // Write-behind runs on the writer thread, which a busy machine can hold back past the
  // next prompt's evictions; the gate lets every filled block land before blocks are evicted.
  const auto all_written = [&] {
    return testing::WaitUntil(
        [&] { return engine->Stats()["pending_writes"]["disk_blocks"].get<int64_t>() == 0; },
        std::chrono::seconds(30));
  };
  EXPECT_EQ(RunAll(*engine, run.first, 4), expected_first);
  ASSERT_TRUE(all_written());
  for (int i = 0; i < 5; ++i) {
    RunAll(*engine, {Prompt(80 + i, 30)}, 2);
    ASSERT_TRUE(all_written());
  }
  EXPECT_EQ(RunAll(*engine, run.later, 4), expected_later);
  const nlohmann::json s = engine->Stats();
  LogStaging("WriteBehindPutsBlocksOnDiskBeforeTheirEviction", s);
  EXPECT_EQ(Get(s, "disk_demote_writes"), 0) << s.dump();
  EXPECT_GT(Get(s, "blocks_persisted"), 8) << s.dump();
  EXPECT_EQ(s["prefix_hits"]["disk"].get<int64_t>(), 8) << s.dump();
  EXPECT_EQ(Get(s, "io_errors"), 0) << s.dump();
}

// A slow disk (10 ms a block) and a prompt of 40 blocks, more than the write-behind buffers
// hold: the step that leaves the context idle starts what it can and returns, waiting for
// no write, and the idle writer writes the rest with no further step. A crash now loses
// none of them.
TEST(DiskStagingEngineTest, AnIdleContextWritesEveryBlockWithoutAnotherStep) {
  FakeFileIo fake;
  testing::SlowFileIo io(&fake, std::chrono::microseconds(10000), std::chrono::microseconds(0));
  EngineOptions o = testing::TierOptions(/*gpu=*/128, /*host=*/0, /*disk=*/256, "/fake/idle.kv");
  o.file_io = &io;
  auto engine = MakeEngine(o);
  ASSERT_NE(engine, nullptr);
  ASSERT_EQ(RunAll(*engine, {Prompt(90, 160)}, 2).size(), 1u);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["pending_writes"]["disk_blocks"].get<int64_t>(), 0) << "the disk was not slow enough to test this";
  EXPECT_EQ(Get(s, "disk_write_waits"), 0) << s.dump();  // no step waited for the disk
  // On disk (journaled) first, then landed: counted as persisted, in the tier's index.
  testing::WaitUntil([&] {
    s = engine->Stats();
    return s["pending_writes"]["disk_blocks"].get<int64_t>() == 0 && Get(s, "blocks_persisted") >= 40;
  }, std::chrono::seconds(30));
  EXPECT_EQ(s["pending_writes"]["disk_blocks"].get<int64_t>(), 0) << s.dump();
  EXPECT_GE(Get(s, "blocks_persisted"), 40) << s.dump();  // 160 + 2 tokens: 40 full blocks
  EXPECT_GE(s["disk_index"]["journal_records"].get<int64_t>(), 40) << s.dump();
  EXPECT_GT(Get(s, "idle_writer_pumps"), 0) << s.dump();
}

TEST(DiskStagingEngineTest, WithoutHostTierEvictionsGoToDiskAndComeBackExact) {
  FakeFileIo io;
  RunPrefixThroughDisk(&io, "WithoutHostTierEvictionsGoToDiskAndComeBackExact");
}

TEST(DiskStagingEngineTest, SlowDiskWithoutHostTierIsExact) {
  FakeFileIo fake;
  testing::SlowFileIo io(&fake, std::chrono::microseconds(2000), std::chrono::microseconds(500));
  RunPrefixThroughDisk(&io, "SlowDiskWithoutHostTierIsExact");
}

// Writes (and reads) fail now and then under device pressure without a host tier: blocks are
// lost from the cache, never from a sequence, and every output is exact.
TEST(DiskStagingEngineTest, FailingDiskWithoutHostTierNeverCorruptsOutput) {
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<int32_t> shared = Prompt(500, 16);
  for (int i = 0; i < 12; ++i) prompts.push_back(Prompt(600 + i, 20, i % 2 ? shared : std::vector<int32_t>{}));
  const auto expected = Reference(prompts, 8);
  FakeFileIo fake;
  testing::SlowFileIo io(&fake, std::chrono::microseconds(300), std::chrono::microseconds(0));
  EngineOptions o = NoHostOptions(&io);
  o.max_running = 3;
  auto engine = MakeEngine(o);
  ASSERT_NE(engine, nullptr);
  std::vector<SequenceId> ids;
  std::map<SequenceId, std::vector<int32_t>> out;
  for (size_t next = 0, step = 0; step < 5000 && (next < prompts.size() || engine->NumUnfinished() > 0); ++step) {
    if (next < prompts.size() && step % 3 == 0) ids.push_back(*engine->Add(prompts[next++], testing::Greedy(8)));
    if (step % 4 == 1) fake.FailNextWrites(1);
    if (step % 7 == 2) fake.FailNextReads(1);
    ASSERT_NO_FATAL_FAILURE(testing::StepAndCollect(*engine, &out, /*verify=*/true)) << "at step " << step;
  }
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(out[ids[i]], expected[i]) << "sequence " << i;
  const nlohmann::json s = engine->Stats();
  LogStaging("FailingDiskWithoutHostTierNeverCorruptsOutput", s);
  EXPECT_GT(Get(s, "disk_demote_writes") + Get(s, "disk_swap_writes"), 0) << s.dump();
  EXPECT_GT(Get(s, "io_errors"), 0) << s.dump();  // a fault is armed until some write meets it
}

}  // namespace
}  // namespace kvtier
