// Forks of a sequence whose KV is kept in layer groups (parallel sampling,
// KvCacheManager::Fork): the child shares every group's full blocks that a query at the
// fork position reads and gets a copy of each group's partial last block; a parent whose
// window has gone past the blocks the child would read is refused, and so is a fork with no
// free block for the copies, leaving everything as it was.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kv/grouped_fixture.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {
namespace {

constexpr int64_t kForkDeviceBlocks = 16;

// Sequence 1 reserved [0, 24) and computed [0, 22): the full group holds blocks 0..5, the
// window group (the next query, at 22, reads 19..21) blocks 4..5; each stamped with
// pattern 1. 16 - 6 - 2 = 8 blocks are left.
void ComputeParent(testing::GroupedFixture& f) {
  ASSERT_TRUE(f.kv->Reserve(1, 24).ok());
  f.kv->OnComputed(1, std::vector<int32_t>(24, 3), 22);
  ASSERT_EQ(f.tables().Table(1, 1).first_block, 4);
  f.Stamp(1, 1);
  ASSERT_EQ(f.kv->num_available_device_blocks(), 8);
}

TEST(GroupedForkTest, SharesTheFullBlocksAndCopiesThePartialOnes) {
  testing::GroupedFixture f(kForkDeviceBlocks, 0, 0, /*prefix_cache=*/false);
  ASSERT_NE(f.kv, nullptr);
  ComputeParent(f);
  ASSERT_TRUE(f.kv->Fork(1, 2, 22).ok());
  for (int64_t g = 0; g < 2; ++g) {
    const GroupBlockTable& parent = f.tables().Table(1, g);
    const GroupBlockTable& child = f.tables().Table(2, g);
    EXPECT_EQ(child.first_block, parent.first_block);
    ASSERT_EQ(child.blocks.size(), parent.blocks.size());
    // Blocks before 5 are full: shared. Block 5 holds 20..21 and is the child's own copy.
    for (size_t i = 0; i + 1 < child.blocks.size(); ++i) EXPECT_EQ(child.blocks[i], parent.blocks[i]);
    EXPECT_NE(child.blocks.back(), parent.blocks.back());
  }
  EXPECT_TRUE(f.Holds(2, 1, 0, 0, 6));
  EXPECT_TRUE(f.Holds(2, 1, 1, 4, 6));
  EXPECT_EQ(f.kv->num_available_device_blocks(), 8 - 2);
  KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.counters.forks, 1);
  EXPECT_EQ(stats.counters.fork_shared_blocks, 5 + 1);
  EXPECT_EQ(stats.counters.fork_copied_blocks, 2);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  // The child writes its own partial blocks; the parent's keep their bytes.
  for (int64_t g = 0; g < 2; ++g) {
    std::memset(f.backend.Block(f.tables().Table(2, g).blocks.back()), 0xab, f.kv->block_bytes());
  }
  EXPECT_TRUE(f.Holds(1, 1, 0, 0, 6));
  EXPECT_TRUE(f.Holds(1, 1, 1, 4, 6));
  // It goes on as any sequence: its window leaves the shared block 4, which the parent keeps.
  ASSERT_TRUE(f.kv->Reserve(2, 28).ok());
  f.kv->OnComputed(2, std::vector<int32_t>(28, 3), 26);
  EXPECT_EQ(f.tables().Table(2, 1).first_block, 5);
  EXPECT_TRUE(f.Holds(1, 1, 1, 4, 6));
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  f.kv->Release(1);
  f.kv->Release(2);
  EXPECT_EQ(f.kv->num_available_device_blocks(), kForkDeviceBlocks);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(GroupedForkTest, AtABlockBoundaryEveryBlockIsShared) {
  testing::GroupedFixture f(kForkDeviceBlocks, 0, 0, /*prefix_cache=*/false);
  ASSERT_NE(f.kv, nullptr);
  ASSERT_TRUE(f.kv->Reserve(1, 20).ok());
  f.kv->OnComputed(1, std::vector<int32_t>(20, 3), 20);  // the window group keeps block 4
  ASSERT_TRUE(f.kv->Fork(1, 2, 20).ok());
  EXPECT_EQ(f.tables().Table(2, 0).blocks, f.tables().Table(1, 0).blocks);
  EXPECT_EQ(f.tables().Table(2, 1).blocks, f.tables().Table(1, 1).blocks);
  EXPECT_EQ(f.kv->Stats().counters.fork_copied_blocks, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(GroupedForkTest, RefusesWhatItCannotGiveAndChangesNothing) {
  testing::GroupedFixture f(kForkDeviceBlocks, 0, 0, /*prefix_cache=*/false);
  ASSERT_NE(f.kv, nullptr);
  ComputeParent(f);
  // A query at 12 reads window blocks 2..3, which the parent dropped.
  EXPECT_EQ(f.kv->Fork(1, 2, 12).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.kv->Fork(1, 2, 23).code(), absl::StatusCode::kFailedPrecondition) << "past what it computed";
  EXPECT_EQ(f.kv->Fork(7, 2, 4).code(), absl::StatusCode::kFailedPrecondition) << "no such parent";
  ASSERT_TRUE(f.kv->Reserve(3, 4).ok());
  EXPECT_EQ(f.kv->Fork(1, 3, 22).code(), absl::StatusCode::kFailedPrecondition) << "the child holds blocks";
  // Every block taken: no room for the partial copies.
  ASSERT_TRUE(f.kv->Reserve(4, 12).ok());
  ASSERT_EQ(f.kv->num_available_device_blocks(), 0);
  EXPECT_EQ(f.kv->Fork(1, 2, 22).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(f.tables().Table(2, 0).blocks.empty());
  EXPECT_EQ(f.kv->num_available_device_blocks(), 0);
  EXPECT_EQ(f.kv->Stats().counters.forks, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

}  // namespace
}  // namespace kvtier
