// Prefix entries of layer groups on the host and disk tiers (KvCacheOptions::layer_groups
// with the prefix cache and a tier below): a group's entry the device evicts is copied
// down under its group's key, counted as one block of one group's layers there; a later
// match loads it back where the next query reads it, to the bytes it had; and a corrupt
// disk copy is detected, dropped and its positions computed again.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kv/grouped_fixture.h"
#include "kv/kv_cache_manager.h"
#include "storage/disk_block_store.h"

namespace kvtier {
namespace {

constexpr int64_t kTierBlockTokens = testing::kGroupedBlockTokens;
constexpr int kTierPattern = 1;

// A pool of 15 blocks, the prefix cache on.
struct GroupedPrefixTiers : testing::GroupedFixture {
  GroupedPrefixTiers(int64_t host_blocks, int64_t disk_blocks)
      : GroupedFixture(/*device_blocks=*/15, host_blocks, disk_blocks, /*prefix_cache=*/true) {}
  int64_t hits(Tier tier) const { return kv->counters().prefix_hits[static_cast<int>(tier)]; }
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
  f.Stamp(1, kTierPattern);
  f.kv->OnComputed(1, tokens, 24);
  f.kv->Release(1);
  ASSERT_TRUE(f.kv->Reserve(9, 16).ok());
  f.Stamp(9, 99);  // written over, as a forward would
  f.kv->Release(9);  // nothing computed: nothing cached
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  const KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.layer_groups.cached_blocks, 12 - kEvicted);
  EXPECT_EQ(stats.counters.blocks_demoted[static_cast<int>(Tier::kDevice)], kEvicted);
  EXPECT_EQ(stats.counters.evictions_copied, kEvicted);
  EXPECT_EQ(stats.counters.blocks_dropped, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// 21 tokens: 5 blocks, whose next query (at 20) reads blocks 0..4 of the full group and
// block 4 of the window (17..19), on the tier below; 13 tokens: 3 blocks, and window block 2.
void ExpectHitsFrom(GroupedPrefixTiers& f, Tier below) {
  EXPECT_EQ(f.kv->MatchPrefix(2, TierPrefixTokens(21)), 20);
  EXPECT_EQ(f.tables().Table(2, 1).first_block, 4);
  EXPECT_EQ(f.tables().Table(2, 1).blocks.size(), 1u);
  EXPECT_TRUE(f.Holds(2, kTierPattern, 0, 0, 5));
  EXPECT_TRUE(f.Holds(2, kTierPattern, 1, 4, 5)) << "the window block came back with its bytes";
  EXPECT_EQ(f.hits(Tier::kDevice), 4);
  EXPECT_EQ(f.hits(below), 1);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  EXPECT_EQ(f.kv->MatchPrefix(3, TierPrefixTokens(13)), 12);
  EXPECT_EQ(f.tables().Table(3, 1).first_block, 2);
  EXPECT_TRUE(f.Holds(3, kTierPattern, 1, 2, 3));
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
  EXPECT_TRUE(f.Holds(2, kTierPattern, 1, 4, 5));
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(GroupedPrefixTiersTest, GroupEntriesOnDiskOutliveARestart) {
  GroupedPrefixTiers f(/*host_blocks=*/0, /*disk_blocks=*/16);
  ASSERT_NE(f.kv, nullptr);
  ComputeThenEvictTheWindowEntries(f);
  // 14 more blocks: every entry but the last released (the window group's block 5) goes down.
  ASSERT_TRUE(f.kv->Reserve(9, 28).ok());
  f.kv->Release(9);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 11);
  ASSERT_NO_FATAL_FAILURE(f.Reopen());
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 11);
  // The next query at 20 reads full blocks 0..4 and window block 4, all on disk; at 24 it
  // would read window block 5, which was on the device only.
  EXPECT_EQ(f.kv->MatchPrefix(2, TierPrefixTokens(25)), 20);
  EXPECT_TRUE(f.Holds(2, kTierPattern, 0, 0, 5));
  EXPECT_TRUE(f.Holds(2, kTierPattern, 1, 4, 5));
  EXPECT_EQ(f.hits(Tier::kDisk), 5);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(GroupedPrefixTiersTest, GroupBlocksOnDiskAreReadAhead) {
  GroupedPrefixTiers f(/*host_blocks=*/8, /*disk_blocks=*/16);
  ASSERT_NE(f.kv, nullptr);
  ComputeThenEvictTheWindowEntries(f);
  ASSERT_TRUE(f.kv->Reserve(9, 28).ok());  // 11 entries go down, the host's overflow to disk
  f.kv->Release(9);
  ASSERT_NO_FATAL_FAILURE(f.Reopen());  // the host's entries are persisted to disk: all 11 there
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 11);
  ASSERT_EQ(f.kv->Stats().tier(Tier::kHost).cached_blocks, 0);
  // The prompt waits while its group blocks are read into host memory, within the host's
  // read-ahead budget.
  EXPECT_TRUE(f.kv->ReadAhead(2, TierPrefixTokens(21)));
  f.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_EQ(f.kv->MatchPrefix(2, TierPrefixTokens(21)), 20);
  EXPECT_GT(f.hits(Tier::kHost), 0) << "read ahead";
  EXPECT_EQ(f.hits(Tier::kHost) + f.hits(Tier::kDisk), 5);
  EXPECT_TRUE(f.Holds(2, kTierPattern, 0, 0, 5));
  EXPECT_TRUE(f.Holds(2, kTierPattern, 1, 4, 5));
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
    ASSERT_TRUE(f.io.FlipBit(testing::kGroupedDiskPath, slot * slot_bytes + payload + 3, 2).ok());
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
