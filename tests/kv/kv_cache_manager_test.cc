// KvCacheManager unit tests over a fake backend: all-or-nothing reservation, swap round
// trips preserve block bytes (host and disk), prefix matching, and invariants under
// thousands of random operations.
#include "kv/kv_cache_manager.h"

#include <map>
#include <random>

#include "gtest/gtest.h"
#include "kv/manager_fixture.h"

namespace kvtier {
namespace {

using Fixture = testing::ManagerFixture;

TEST(KvCacheManagerTest, ReserveIsAllOrNothing) {
  Fixture f(3, 0, 0);
  ASSERT_TRUE(f.kv->Reserve(1, 8).ok());
  EXPECT_EQ(f.kv->BlockTable(1).size(), 2u);
  absl::Status s = f.kv->Reserve(2, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("needs 2"), std::string::npos) << s;
  EXPECT_TRUE(f.kv->BlockTable(2).empty());
  ASSERT_TRUE(f.kv->Reserve(1, 9).ok());
  EXPECT_EQ(f.kv->num_available_device_blocks(), 0);
  f.kv->Release(1);
  EXPECT_EQ(f.kv->num_available_device_blocks(), 3);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(KvCacheManagerTest, SwapRoundTripPreservesBytesThroughHostAndDisk) {
  Fixture f(/*device=*/6, /*host=*/2, /*disk=*/8);
  ASSERT_TRUE(f.kv->Reserve(7, 20).ok());  // 5 blocks: 2 go to host, 3 to disk
  f.Stamp(7);
  ASSERT_TRUE(f.kv->SwapOut(7).ok());
  EXPECT_TRUE(f.kv->IsSwappedOut(7));
  EXPECT_EQ(f.kv->Stats().tier(Tier::kHost).used_blocks, 2);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 3);
  ASSERT_TRUE(f.kv->Reserve(8, 24).ok());  // someone else scribbles over the device blocks
  f.Stamp(8);
  f.kv->Release(8);
  ASSERT_TRUE(f.kv->SwapIn(7).ok());
  EXPECT_TRUE(f.Check(7));
  EXPECT_EQ(f.kv->Stats().tier(Tier::kHost).used_blocks, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// Disk -> host read-ahead of a swapped sequence's disk blocks (on the I/O thread): they land
// as host slots, a swap-in then returns the same bytes; a sequence released while its
// reads are in flight leaves the slots to the reads, which free them when they land.
TEST(KvCacheManagerTest, SwappedDiskBlocksAreReadAheadIntoHostSlots) {
  Fixture f(/*device=*/8, /*host=*/12, /*disk=*/32);
  ASSERT_TRUE(f.kv->Reserve(1, 32).ok());  // 8 blocks, all to host
  ASSERT_TRUE(f.kv->SwapOut(1).ok());
  ASSERT_TRUE(f.kv->Reserve(2, 24).ok());  // 6 blocks: 4 to host, 2 to disk
  f.Stamp(2);
  ASSERT_TRUE(f.kv->SwapOut(2).ok());
  ASSERT_TRUE(f.kv->Reserve(3, 32).ok());  // 8 blocks, all to disk
  f.Stamp(3);
  ASSERT_TRUE(f.kv->SwapOut(3).ok());
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 10);
  f.kv->Release(1);  // host room for read-ahead
  f.kv->ReadAhead(2, {});  // nothing yet: its blocks are still being written to disk
  EXPECT_EQ(f.kv->transfers().num_in_flight(Lane::kDiskRead), 0);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);

  f.kv->ReadAhead(2, {});
  f.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_EQ(f.kv->counters().disk.read_aheads, 2);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 8);  // seq 2's disk slots are host slots now
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  ASSERT_TRUE(f.kv->SwapIn(2).ok());
  EXPECT_TRUE(f.Check(2));
  EXPECT_EQ(f.kv->counters().corrupt_blocks_detected, 0);

  f.kv->ReadAhead(3, {});  // at most a quarter of the host tier in flight: 3 blocks
  EXPECT_EQ(f.kv->transfers().num_in_flight(Lane::kDiskRead) + f.kv->counters().disk.read_aheads, 2 + 3);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  f.kv->Release(3);  // reads may still be in flight: they own the disk slots now
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  f.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 0);
  EXPECT_EQ(f.kv->transfers().num_in_flight(Lane::kDiskRead), 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(KvCacheManagerTest, CorruptSwappedDiskCopyIsDetected) {
  Fixture f(/*device=*/4, /*host=*/0, /*disk=*/8);
  ASSERT_TRUE(f.kv->Reserve(3, 8).ok());
  f.Stamp(3);
  ASSERT_TRUE(f.kv->SwapOut(3).ok());
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);  // the I/O thread writes the swapped blocks
  auto contents = f.io.Contents("/fake/kv");
  ASSERT_TRUE(contents.ok());
  // A bit of every slot's payload.
  for (int64_t offset = f.DiskPayloadOffset(0) + 10; offset < static_cast<int64_t>(contents->size());
       offset += f.DiskPayloadOffset(1) - f.DiskPayloadOffset(0)) {
    ASSERT_TRUE(f.io.FlipBit("/fake/kv", offset, 3).ok());
  }
  absl::Status s = f.kv->SwapIn(3);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_FALSE(f.kv->IsSwappedOut(3));
  EXPECT_TRUE(f.kv->BlockTable(3).empty());
  EXPECT_GT(f.kv->counters().corrupt_blocks_detected, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(KvCacheManagerTest, PrefixMatchSharesDeviceBlocksAndLeavesOneTokenToCompute) {
  Fixture f(8, 0, 0);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(f.kv->Reserve(1, 12).ok());
  f.kv->OnComputed(1, tokens, 12);
  f.kv->Release(1);  // its three full blocks stay cached
  EXPECT_EQ(f.kv->num_available_device_blocks(), 8);
  EXPECT_EQ(f.kv->MatchPrefix(2, tokens), 8);  // 12 tokens: at most 2 blocks, one token left
  std::vector<int32_t> other = {1, 2, 3, 4, 9, 9, 9, 9, 9};
  EXPECT_EQ(f.kv->MatchPrefix(3, other), 4);
  EXPECT_EQ(f.kv->BlockTable(3)[0], f.kv->BlockTable(2)[0]);
  EXPECT_EQ(f.kv->counters().prefix_hits[0], 3);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(KvCacheManagerTest, EvictsLowPriorityCachedBlocksFirst) {
  Fixture f(/*device=*/3, /*host=*/0, /*disk=*/0);
  std::vector<int32_t> important = {1, 1, 1, 1, 9};
  std::vector<int32_t> casual = {2, 2, 2, 2, 9};
  ASSERT_TRUE(f.kv->Reserve(1, 4).ok());
  f.kv->OnComputed(1, important, 4, /*priority=*/5);
  f.kv->Release(1);
  ASSERT_TRUE(f.kv->Reserve(2, 4).ok());  // used more recently, but priority 0
  f.kv->OnComputed(2, casual, 4, /*priority=*/0);
  f.kv->Release(2);
  ASSERT_TRUE(f.kv->Reserve(3, 8).ok());  // needs two blocks: one free, one evicted
  EXPECT_EQ(f.kv->MatchPrefix(4, important), 4);  // the high-priority prefix survived
  EXPECT_EQ(f.kv->MatchPrefix(5, casual), 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// 3000 random operations on six sequences whose tokens collide often, VerifyIntegrity after
// each. With `faults`, disk writes and reads fail now and then (the I/O threads meet them).
void RunRandomOperations(Fixture& f, uint32_t seed, bool faults) {
  std::mt19937 rng(seed);
  std::map<SequenceId, std::vector<int32_t>> tokens;
  for (int op = 0; op < 3000; ++op) {
    const SequenceId seq = static_cast<SequenceId>(rng() % 6);
    auto& t = tokens[seq];
    if (faults && rng() % 16 == 0) (rng() % 2 ? f.io.FailNextWrites(1) : f.io.FailNextReads(1));
    switch (rng() % 6) {
      case 0:
        f.kv->Release(seq);
        t.clear();
        break;
      case 1:
        if (!f.kv->IsSwappedOut(seq)) f.kv->SwapOut(seq).IgnoreError();
        break;
      case 2:
        if (f.kv->IsSwappedOut(seq) && !f.kv->SwapIn(seq).ok()) t.clear();
        break;
      case 3:
        if (!f.kv->IsSwappedOut(seq) && f.kv->BlockTable(seq).empty()) {
          t.clear();
          for (int i = 0; i < 10; ++i) t.push_back(static_cast<int32_t>(rng() % 3));  // collide often
          f.kv->MatchPrefix(seq, t);
        }
        break;
      default:
        if (!f.kv->IsSwappedOut(seq)) {
          const int64_t n = static_cast<int64_t>(f.kv->BlockTable(seq).size()) * 3 + static_cast<int64_t>(rng() % 4);
          while (static_cast<int64_t>(t.size()) < n) t.push_back(static_cast<int32_t>(rng() % 3));
          if (f.kv->Reserve(seq, n).ok()) f.kv->OnComputed(seq, t, n);
        }
    }
    absl::Status s = f.kv->VerifyIntegrity();
    ASSERT_TRUE(s.ok()) << s << " seed " << seed << " op " << op;
  }
}

TEST(KvCacheManagerTest, RandomOperationsKeepInvariants) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    Fixture f(/*device=*/10, /*host=*/4, /*disk=*/12, /*block_tokens=*/3);
    ASSERT_NO_FATAL_FAILURE(RunRandomOperations(f, seed, /*faults=*/false));
  }
}

// Without a host tier every dirty device victim goes to disk through the writer thread and
// every disk hit or disk swap-in is a staged read; a slow disk keeps writes in flight across
// operations, failing writes and reads exercise the failure paths.
TEST(KvCacheManagerTest, RandomOperationsWithoutHostTierKeepInvariants) {
  for (uint32_t seed : {5u, 6u, 7u}) {
    Fixture f(/*device=*/10, /*host=*/0, /*disk=*/12, /*block_tokens=*/3,
              /*write_delay=*/std::chrono::microseconds(seed == 7 ? 200 : 0));
    ASSERT_NO_FATAL_FAILURE(RunRandomOperations(f, seed, /*faults=*/seed != 5));
    f.kv->transfers().AwaitLane(Lane::kDiskWrite);
    EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
    EXPECT_GT(f.kv->counters().disk.demote_writes, 0) << "seed " << seed;
    EXPECT_GT(f.kv->counters().disk.staged_reads, 0) << "seed " << seed;
  }
}

}  // namespace
}  // namespace kvtier
