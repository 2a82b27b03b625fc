// Tests of BlockPool and KvCacheManager: allocation, release, invariants under random ops.
#include "kv/block_pool.h"

#include <random>

#include "gtest/gtest.h"
#include "kv/kv_cache_manager.h"

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

TEST(KvCacheManagerTest, ReserveIsAllOrNothing) {
  KvCacheManager kv(/*num_device_blocks=*/3, /*block_tokens=*/4);
  ASSERT_TRUE(kv.Reserve(1, 8).ok());  // 2 blocks
  EXPECT_EQ(kv.BlockTable(1).size(), 2u);
  absl::Status s = kv.Reserve(2, 8);  // needs 2, 1 free
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("needs 2"), std::string::npos) << s;
  EXPECT_TRUE(kv.BlockTable(2).empty());
  EXPECT_EQ(kv.num_free_device_blocks(), 1);
  ASSERT_TRUE(kv.Reserve(1, 9).ok());  // grows by one
  EXPECT_EQ(kv.num_free_device_blocks(), 0);
  kv.Release(1);
  EXPECT_EQ(kv.num_free_device_blocks(), 3);
  EXPECT_TRUE(kv.VerifyIntegrity().ok());
}

TEST(KvCacheManagerTest, RandomOperationsKeepInvariants) {
  std::mt19937 rng(42);
  KvCacheManager kv(/*num_device_blocks=*/17, /*block_tokens=*/3);
  std::map<SequenceId, int64_t> lengths;
  for (int op = 0; op < 5000; ++op) {
    SequenceId seq = static_cast<SequenceId>(rng() % 8);
    if (rng() % 4 == 0) {
      kv.Release(seq);
      lengths.erase(seq);
    } else {
      int64_t want = lengths[seq] + static_cast<int64_t>(rng() % 7);
      int64_t free_before = kv.num_free_device_blocks();
      int64_t need = kv.NewBlocksNeeded(seq, want);
      absl::Status s = kv.Reserve(seq, want);
      if (need > free_before) {
        EXPECT_FALSE(s.ok());
        EXPECT_EQ(kv.num_free_device_blocks(), free_before);
      } else {
        ASSERT_TRUE(s.ok());
        lengths[seq] = want;
        EXPECT_GE(static_cast<int64_t>(kv.BlockTable(seq).size()) * 3, want);
      }
    }
    ASSERT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity() << " after op " << op;
  }
}

}  // namespace
}  // namespace kvtier
