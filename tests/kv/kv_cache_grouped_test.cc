// The KV cache manager with layer groups (KvCacheOptions::layer_groups): it takes every
// tier, gives a windowed group's blocks back as the sequence computes and reports the
// groups in its stats. Prefix entries: grouped_prefix_test.cc, grouped_prefix_tiers_test.cc
// and grouped_remote_test.cc; swaps: grouped_swap_test.cc; forks: grouped_fork_test.cc.
#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "kv/kv_cache_manager.h"
#include "testing/fake_backend.h"

namespace kvtier {
namespace {

// Two layers: a full-attention one and one of window 4 (two groups of one layer).
KvLayerGroups TwoGroups(int64_t block_tokens) {
  const std::vector<std::optional<int64_t>> windows = {std::nullopt, 4};
  absl::StatusOr<KvLayerGroups> groups = KvLayerGroups::Create(windows, block_tokens, /*grouped=*/true);
  EXPECT_TRUE(groups.ok()) << groups.status();
  return *std::move(groups);
}

KvCacheOptions GroupedOptions(int64_t device_blocks) {
  KvCacheOptions options;
  options.block_tokens = 4;
  options.device_blocks = device_blocks;
  options.prefix_cache = false;
  options.layer_groups = TwoGroups(4);
  return options;
}

TEST(KvCacheGroupedTest, TakesGroupsWithEveryTier) {
  testing::FakeBackend backend(4);
  ASSERT_TRUE(backend.AllocateKvPool(16).ok());
  KvCacheOptions cached = GroupedOptions(16);
  cached.prefix_cache = true;  // prefix entries on the device (grouped_prefix_test.cc)
  EXPECT_TRUE(KvCacheManager::Create(cached, &backend).ok());
  cached.host_blocks = 4;  // and on the host (grouped_prefix_tiers_test.cc)
  EXPECT_TRUE(KvCacheManager::Create(cached, &backend).ok());
  cached.remote.url = "redis://127.0.0.1:1";  // and in Redis (grouped_remote_test.cc)
  EXPECT_TRUE(KvCacheManager::Create(cached, &backend).ok());
  KvCacheOptions host = GroupedOptions(16);
  host.host_blocks = 4;  // the host tier takes grouped swaps
  EXPECT_TRUE(KvCacheManager::Create(host, &backend).ok());
  EXPECT_TRUE(KvCacheManager::Create(GroupedOptions(16), &backend).ok());
}

TEST(KvCacheGroupedTest, WindowedBlocksGoBackAsTheSequenceComputes) {
  testing::FakeBackend backend(4);
  ASSERT_TRUE(backend.AllocateKvPool(16).ok());
  absl::StatusOr<std::unique_ptr<KvCacheManager>> created = KvCacheManager::Create(GroupedOptions(16), &backend);
  ASSERT_TRUE(created.ok()) << created.status();
  KvCacheManager& kv = **created;
  ASSERT_NE(kv.grouped(), nullptr);
  const std::vector<int32_t> tokens(24, 7);
  EXPECT_EQ(kv.NewBlocksNeeded(1, 16), 8);  // 4 blocks in each group
  ASSERT_TRUE(kv.Reserve(1, 16).ok());
  EXPECT_EQ(kv.num_available_device_blocks(), 8);
  // Computed [0, 16): the next query (at 16) reads (12, 16] in the window: block 3 only.
  kv.OnComputed(1, tokens, 16);
  EXPECT_EQ(kv.num_available_device_blocks(), 11);
  EXPECT_EQ(kv.grouped()->Table(1, 1).first_block, 3);
  EXPECT_EQ(kv.BlockTable(1).size(), 4u);  // group 0, full attention, keeps all
  KvStats stats = kv.Stats();
  EXPECT_EQ(stats.layer_groups.group_blocks, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(stats.layer_groups.blocks_dropped_for_window, 3);
  EXPECT_EQ(stats.tier(Tier::kDevice).used_blocks, 5);
  EXPECT_EQ(stats.tier(Tier::kDevice).capacity_blocks, 16);
  EXPECT_TRUE(kv.VerifyIntegrity().ok());
  EXPECT_EQ(kv.SwapOut(1).code(), absl::StatusCode::kResourceExhausted) << "no host or disk slot to swap to";
  EXPECT_FALSE(kv.IsSwappedOut(1));
  EXPECT_EQ(kv.BlockTable(1).size(), 4u) << "a failed swap-out keeps the blocks";
  kv.Release(1);
  EXPECT_EQ(kv.num_available_device_blocks(), 16);
  EXPECT_TRUE(kv.BlockTable(1).empty());
  EXPECT_TRUE(kv.VerifyIntegrity().ok());
}

}  // namespace
}  // namespace kvtier
