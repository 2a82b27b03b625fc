// Swaps of a sequence whose KV is kept in layer groups (KvCacheOptions::layer_groups): only
// the blocks each group still holds for its computed positions travel to the host or disk
// tier (a windowed group's dropped blocks and the blocks reserved past the computed
// positions do not), they come back into tables rebuilt exactly, and a damaged or short
// disk record of one is detected and dropped, never read as KV.
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv/grouped_fixture.h"
#include "kv/kv_cache_manager.h"
#include "storage/disk_block_store.h"

namespace kvtier {
namespace {

constexpr int64_t kSwapBlockTokens = testing::kGroupedBlockTokens;
constexpr int64_t kSwapWindow = testing::kGroupedWindow;
constexpr int64_t kSwapDeviceBlocks = 16;
const char* const kSwapDiskPath = testing::kGroupedDiskPath;

// Without the prefix cache: the swaps are all the tiers below hold.
struct GroupedSwapFixture : testing::GroupedFixture {
  GroupedSwapFixture(int64_t host_blocks, int64_t disk_blocks)
      : GroupedFixture(kSwapDeviceBlocks, host_blocks, disk_blocks, /*prefix_cache=*/false) {}
};

// Sequence 1 reserved [0, 28) (7 blocks in each group) and computed [0, 22). Position by
// position: the full-attention group keeps blocks 0..5 (positions 0..21 lie in blocks 0..5;
// block 6, positions 24..27, was only reserved). The next query, at 22, reads positions
// (22 - 4, 22] in the window: 19..21 computed, in blocks 4 (16..19) and 5 (20..23); the
// window group dropped blocks 0..3 and keeps 4..5. A swap-out carries 6 + 2 = 8 blocks of
// the 14 the sequence holds.
constexpr int64_t kReserved = 28;
constexpr int64_t kComputed = 22;
constexpr int64_t kFullKept = 6;
constexpr int64_t kWindowFirst = 4;
constexpr int64_t kKept = kFullKept + (kFullKept - kWindowFirst);

void HoldComputedSequence(GroupedSwapFixture& f, SequenceId seq) {
  const std::vector<int32_t> tokens(kReserved, 5);
  ASSERT_TRUE(f.kv->Reserve(seq, kReserved).ok());
  f.kv->OnComputed(seq, tokens, kComputed);
  ASSERT_EQ(f.tables().Table(seq, 1).first_block, kWindowFirst);
  ASSERT_EQ(f.kv->num_available_device_blocks(), kSwapDeviceBlocks - 7 - (7 - kWindowFirst));
  f.Stamp(seq, static_cast<int>(seq));
}

// Another sequence takes every block and writes over it, then gives them back.
void ScribbleOverEveryBlock(GroupedSwapFixture& f) {
  ASSERT_TRUE(f.kv->Reserve(99, kSwapDeviceBlocks / 2 * kSwapBlockTokens).ok());
  f.Stamp(99, 99);
  f.kv->Release(99);
}

void ExpectRestored(GroupedSwapFixture& f, SequenceId seq) {
  EXPECT_FALSE(f.kv->IsSwappedOut(seq));
  EXPECT_EQ(f.tables().Table(seq, 0).first_block, 0);
  EXPECT_EQ(f.tables().Table(seq, 0).blocks.size(), static_cast<size_t>(kFullKept));
  EXPECT_EQ(f.tables().Table(seq, 1).first_block, kWindowFirst);
  EXPECT_EQ(f.tables().Table(seq, 1).blocks.size(), static_cast<size_t>(kFullKept - kWindowFirst));
  EXPECT_TRUE(f.Holds(seq, static_cast<int>(seq), 0, 0, kFullKept));
  EXPECT_TRUE(f.Holds(seq, static_cast<int>(seq), 1, kWindowFirst, kFullKept));
  EXPECT_EQ(f.kv->num_available_device_blocks(), kSwapDeviceBlocks - kKept);
  EXPECT_EQ(f.kv->Stats().layer_groups.group_blocks, (std::vector<int64_t>{kFullKept, kFullKept - kWindowFirst}));
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  // It goes on from where it was: the next positions are reserved and computed as before.
  const std::vector<int32_t> tokens(32, 5);
  ASSERT_TRUE(f.kv->Reserve(seq, 32).ok());
  f.kv->OnComputed(seq, tokens, 30);
  EXPECT_EQ(f.tables().Table(seq, 1).first_block, (30 - kSwapWindow + 1) / kSwapBlockTokens);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(GroupedSwapTest, HostSwapCarriesOnlyTheBlocksEachGroupKeeps) {
  GroupedSwapFixture f(/*host_blocks=*/16, /*disk_blocks=*/0);
  ASSERT_NE(f.kv, nullptr);
  HoldComputedSequence(f, 1);
  EXPECT_EQ(f.tables().KeptBlocks(1).size(), static_cast<size_t>(kKept));
  ASSERT_TRUE(f.kv->SwapOut(1).ok());
  EXPECT_TRUE(f.kv->IsSwappedOut(1));
  EXPECT_EQ(f.kv->SwappedBlocks(1), kKept);
  const size_t block_bytes = f.kv->block_bytes();
  KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.tier(Tier::kHost).used_blocks, kKept);
  EXPECT_EQ(stats.counters.swap_out_bytes, static_cast<int64_t>(kKept * block_bytes));
  EXPECT_EQ(f.kv->num_available_device_blocks(), kSwapDeviceBlocks);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  ScribbleOverEveryBlock(f);
  ASSERT_TRUE(f.kv->SwapIn(1).ok());
  EXPECT_EQ(f.kv->Stats().counters.swap_in_bytes, static_cast<int64_t>(kKept * block_bytes));
  EXPECT_EQ(f.kv->Stats().tier(Tier::kHost).used_blocks, 0);
  ExpectRestored(f, 1);
}

TEST(GroupedSwapTest, DiskSwapWritesAndReadsOnlyTheKeptBlocks) {
  GroupedSwapFixture f(/*host_blocks=*/0, /*disk_blocks=*/16);
  ASSERT_NE(f.kv, nullptr);
  HoldComputedSequence(f, 2);
  ASSERT_TRUE(f.kv->SwapOut(2).ok());
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  const size_t block_bytes = f.kv->block_bytes();
  KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.counters.disk.swap_writes, kKept);
  EXPECT_EQ(stats.disk_store.bytes_written, static_cast<int64_t>(kKept * block_bytes));
  EXPECT_EQ(stats.tier(Tier::kDisk).used_blocks, kKept);
  ScribbleOverEveryBlock(f);
  ASSERT_TRUE(f.kv->SwapIn(2).ok());
  EXPECT_EQ(f.kv->Stats().disk_store.bytes_read, static_cast<int64_t>(kKept * block_bytes));
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 0);
  ExpectRestored(f, 2);
}

TEST(GroupedSwapTest, SequenceWithNothingComputedStartsOver) {
  GroupedSwapFixture f(/*host_blocks=*/16, /*disk_blocks=*/0);
  ASSERT_NE(f.kv, nullptr);
  ASSERT_TRUE(f.kv->Reserve(3, 12).ok());  // reserved, nothing computed: nothing to keep
  ASSERT_TRUE(f.kv->SwapOut(3).ok());
  EXPECT_FALSE(f.kv->IsSwappedOut(3));
  EXPECT_EQ(f.kv->num_available_device_blocks(), kSwapDeviceBlocks);
  EXPECT_EQ(f.kv->Stats().counters.swap_out_bytes, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// Damage to the disk record of a grouped sequence's swap, by `damage` once its writes have
// landed: the swap-in fails, the sequence holds nothing (it is computed again), and no
// block of the record reached the group tables.
void ExpectDamagedSwapDropped(const std::function<void(GroupedSwapFixture&)>& damage,
                              const std::function<void(const absl::Status&)>& expect_error) {
  GroupedSwapFixture f(/*host_blocks=*/0, /*disk_blocks=*/16);
  ASSERT_NE(f.kv, nullptr);
  HoldComputedSequence(f, 4);
  ASSERT_TRUE(f.kv->SwapOut(4).ok());
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  damage(f);
  expect_error(f.kv->SwapIn(4));
  EXPECT_FALSE(f.kv->IsSwappedOut(4));
  EXPECT_TRUE(f.tables().Table(4, 0).blocks.empty());
  EXPECT_TRUE(f.tables().Table(4, 1).blocks.empty());
  EXPECT_EQ(f.kv->num_available_device_blocks(), kSwapDeviceBlocks);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).used_blocks, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

int64_t GroupedSwapSlotBytes(const GroupedSwapFixture& f) { return DiskBlockStore::SlotBytes(f.kv->block_bytes(), kSwapBlockTokens); }

TEST(GroupedSwapTest, CorruptDiskRecordIsDetected) {
  ExpectDamagedSwapDropped(
      [](GroupedSwapFixture& f) {
        // One bit of every written slot's payload.
        const int64_t payload = static_cast<int64_t>(SlotHeaderBytes(kSwapBlockTokens));
        for (int32_t slot = 0; slot < kKept; ++slot) {
          ASSERT_TRUE(f.io.FlipBit(kSwapDiskPath, slot * GroupedSwapSlotBytes(f) + payload + 3, 2).ok());
        }
      },
      [](const absl::Status& s) { EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s; });
}

TEST(GroupedSwapTest, ShortDiskRecordIsDetected) {
  ExpectDamagedSwapDropped(
      [](GroupedSwapFixture& f) {
        // The file ends inside the first kept block's slot: every record is short or gone.
        ASSERT_TRUE(f.io.Truncate(kSwapDiskPath, GroupedSwapSlotBytes(f) / 2).ok());
      },
      [](const absl::Status& s) {
        EXPECT_FALSE(s.ok());
        EXPECT_NE(s.message().find("short read"), std::string::npos) << s;
      });
}

}  // namespace
}  // namespace kvtier
