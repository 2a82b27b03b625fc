// Tests of BlockPool and KvCacheManager: allocation, release, invariants under random ops.
#include "kv/block_pool.h"

#include <random>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

TEST(BlockPoolTest, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(4);
  std::vector<BlockId> got;
  for (int i = 0; i < 4; ++i) {
    auto id = pool.Allocate();
    ASSERT_TRUE(id.has_value());
    got.push_back(*id);
  }
  EXPECT_FALSE(pool.Allocate().has_value());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<BlockId>{0, 1, 2, 3}));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.peak_used(), 4);
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPoolTest, GrowsToItsBudgetAsBlocksBecomeAvailable) {
  BlockPool pool(5, 2);
  EXPECT_EQ(pool.num_blocks(), 5);  // the budget, from the start
  EXPECT_EQ(pool.num_available(), 2);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_FALSE(pool.AllocateSpecific(3)) << "not available yet";
  BlockId a = *pool.Allocate();
  BlockId b = *pool.Allocate();
  EXPECT_FALSE(pool.Allocate().has_value()) << "the rest is not available yet";
  EXPECT_EQ(pool.num_used(), 2);
  EXPECT_TRUE(pool.VerifyIntegrity().ok()) << pool.VerifyIntegrity();
  pool.MakeAvailable(4);
  pool.MakeAvailable(3);  // never shrinks
  EXPECT_EQ(pool.num_available(), 4);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_used(), 2);
  EXPECT_TRUE(pool.AllocateSpecific(3));
  EXPECT_EQ(*pool.Allocate(), 2);
  pool.MakeAvailable(99);  // clamped to the budget
  EXPECT_EQ(pool.num_available(), 5);
  EXPECT_EQ(*pool.Allocate(), 4);
  EXPECT_EQ(pool.peak_used(), 5);
  pool.Release(a);
  pool.Release(b);
  EXPECT_TRUE(pool.VerifyIntegrity().ok()) << pool.VerifyIntegrity();
}

TEST(BlockPoolTest, IntegrityCatchesABlockUsedBeforeItIsAvailable) {
  BlockPool pool(3, 1);
  pool.AddRef(2);  // a holder of a block the pool has not handed out
  absl::Status status = pool.VerifyIntegrity();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("before it is available"), std::string::npos) << status;
}

TEST(BlockPoolTest, SharedBlockReturnsOnlyAtLastRelease) {
  BlockPool pool(2);
  BlockId id = *pool.Allocate();
  pool.AddRef(id);
  EXPECT_FALSE(pool.Release(id));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_TRUE(pool.Release(id));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_TRUE(pool.VerifyIntegrity().ok());
}

TEST(BlockPoolTest, FreedBlocksAreReusedLast) {
  BlockPool pool(3);
  BlockId a = *pool.Allocate();
  pool.Release(a);
  EXPECT_NE(*pool.Allocate(), a);
}

}  // namespace
}  // namespace kvtier
