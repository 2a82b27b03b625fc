// Prefix entries of a context whose KV is kept in layer groups (KvCacheOptions::layer_groups
// with the prefix cache, no tier below; grouped_prefix_tiers_test.cc has the tiers below): each group's computed full blocks are kept under
// their chain key and group, also the windowed group's blocks that left the window, and a new
// sequence reuses a prefix only if every block its next query reads is still cached in
// every group — a long prefix can hit where a shorter one, which reads further back in the
// window, cannot; and a pinned prefix keeps every entry its match reads.
#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "kv/kv_cache_manager.h"
#include "testing/fake_backend.h"

namespace kvtier {
namespace {

constexpr int64_t kPrefixBlockTokens = 4;

// A full-attention layer and a layer of window 4 (two groups of one layer), prefix cache on.
std::unique_ptr<KvCacheManager> GroupedPrefixManager(testing::FakeBackend& backend, int64_t device_blocks) {
  EXPECT_TRUE(backend.AllocateKvPool(device_blocks).ok());
  const std::vector<std::optional<int64_t>> windows = {std::nullopt, 4};
  absl::StatusOr<KvLayerGroups> groups = KvLayerGroups::Create(windows, kPrefixBlockTokens, /*grouped=*/true);
  EXPECT_TRUE(groups.ok()) << groups.status();
  KvCacheOptions options;
  options.block_tokens = kPrefixBlockTokens;
  options.device_blocks = device_blocks;
  options.prefix_cache = true;
  options.model_fingerprint = 42;
  options.layer_groups = *std::move(groups);
  absl::StatusOr<std::unique_ptr<KvCacheManager>> created = KvCacheManager::Create(options, &backend);
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? *std::move(created) : nullptr;
}

std::vector<int32_t> PrefixTokens(int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(100 + i);
  return out;
}

// Sequence 1 computes positions [0, 24): 6 full blocks in each group, all made entries
// before the window group drops its blocks 0..4 (the next query, at 24, reads 21..23 of
// block 5). Released, its 12 entries wait for reuse.
void ComputeAndRelease(KvCacheManager& kv) {
  const std::vector<int32_t> tokens = PrefixTokens(24);
  ASSERT_TRUE(kv.Reserve(1, 24).ok());
  kv.OnComputed(1, tokens, 24);
  EXPECT_EQ(kv.grouped()->Table(1, 1).first_block, 5);
  EXPECT_EQ(kv.Stats().layer_groups.cached_blocks, 12);
  kv.Release(1);
  const KvStats stats = kv.Stats();
  EXPECT_EQ(stats.tier(Tier::kDevice).used_blocks, 0);
  EXPECT_EQ(stats.tier(Tier::kDevice).cached_blocks, 12);
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();
}

TEST(GroupedPrefixTest, ReusesEveryBlockTheNextQueryReads) {
  testing::FakeBackend backend(kPrefixBlockTokens);
  std::unique_ptr<KvCacheManager> kv = GroupedPrefixManager(backend, 16);
  ASSERT_NE(kv, nullptr);
  ComputeAndRelease(*kv);
  EXPECT_EQ(kv->num_available_device_blocks(), 16);  // entries no table holds are evictable
  // 25 tokens: at most 6 blocks (one token left). The next query, at 24, reads blocks 0..5
  // of the full group and block 5 of the window group.
  EXPECT_EQ(kv->MatchPrefix(2, PrefixTokens(25)), 24);
  EXPECT_EQ(kv->grouped()->Table(2, 0).blocks.size(), 6u);
  EXPECT_EQ(kv->grouped()->Table(2, 1).first_block, 5);
  EXPECT_EQ(kv->grouped()->Table(2, 1).blocks.size(), 1u);
  EXPECT_EQ(kv->counters().prefix_hits[static_cast<int>(Tier::kDevice)], 6);
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
  // 10 tokens: 2 blocks; the query at 8 reads blocks 0..1 and, in the window (5..7), block 1.
  EXPECT_EQ(kv->MatchPrefix(3, PrefixTokens(10)), 8);
  EXPECT_EQ(kv->grouped()->Table(3, 1).first_block, 1);
  EXPECT_EQ(kv->grouped()->Table(3, 0).blocks[0], kv->grouped()->Table(2, 0).blocks[0]) << "shared";
  // Other tokens after the first block: only block 0 matches, and the query at 4 reads
  // block 0 in both groups.
  std::vector<int32_t> other = PrefixTokens(4);
  for (int i = 0; i < 8; ++i) other.push_back(7);
  EXPECT_EQ(kv->MatchPrefix(4, other), 4);
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
  kv->UnmatchPrefix(4);
  EXPECT_EQ(kv->counters().prefix_hits[static_cast<int>(Tier::kDevice)], 6 + 2);
  // Going on from a match: the sequence computes and drops as any other.
  ASSERT_TRUE(kv->Reserve(3, 12).ok());
  kv->OnComputed(3, PrefixTokens(12), 12);
  EXPECT_EQ(kv->grouped()->Table(3, 1).first_block, (12 - 4 + 1) / kPrefixBlockTokens);
  kv->Release(2);
  kv->Release(3);
  EXPECT_EQ(kv->num_available_device_blocks(), 16);
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
}

TEST(GroupedPrefixTest, ALongPrefixHitsWhereAShorterOneNeedsEvictedWindowBlocks) {
  testing::FakeBackend backend(kPrefixBlockTokens);
  std::unique_ptr<KvCacheManager> kv = GroupedPrefixManager(backend, 15);
  ASSERT_NE(kv, nullptr);
  ComputeAndRelease(*kv);
  // 3 blocks free. Eviction order: the window group's blocks 0..4 (released as they left
  // the window), then the full group's 0..5 and the window group's 5 (the release). A
  // sequence taking 8 blocks takes the 3 free ones and evicts the window group's 0..4.
  ASSERT_TRUE(kv->Reserve(9, 16).ok());
  EXPECT_EQ(kv->Stats().layer_groups.cached_blocks, 12 - 5);
  kv->Release(9);  // nothing computed: nothing cached
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
  // 21 tokens: at most 5 blocks, whose next query (at 20) reads window block 4 (17..19),
  // evicted; every shorter prefix reads an evicted window block too. Computed again.
  EXPECT_EQ(kv->MatchPrefix(2, PrefixTokens(21)), 0);
  EXPECT_TRUE(kv->grouped()->Table(2, 0).blocks.empty());
  // 25 tokens: 6 blocks, whose next query reads only window block 5, still cached.
  EXPECT_EQ(kv->MatchPrefix(3, PrefixTokens(25)), 24);
  EXPECT_EQ(kv->counters().prefix_hits[static_cast<int>(Tier::kDevice)], 6);
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
}

// A pinned prefix of 5 blocks keeps every entry its match reads (the full group's 0..4,
// the window group's 4) from eviction, until unpinned; the window group's 0..3 go first.
TEST(GroupedPrefixTest, APinnedPrefixKeepsEveryEntryItsMatchReads) {
  testing::FakeBackend backend(kPrefixBlockTokens);
  std::unique_ptr<KvCacheManager> kv = GroupedPrefixManager(backend, 15);
  ASSERT_NE(kv, nullptr);
  const std::vector<int32_t> tokens = PrefixTokens(24);
  ASSERT_TRUE(kv->Reserve(1, 24).ok());
  kv->OnComputed(1, tokens, 24);
  kv->PinPrefix(1, 5, tokens);
  kv->PinPrefix(1, 5, tokens);  // idempotent
  EXPECT_EQ(kv->num_pinned_blocks(), 6);
  kv->Release(1);
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
  EXPECT_EQ(kv->num_available_device_blocks(), 15 - 6);
  // 8 blocks: the 3 free ones and 5 unpinned entries (the window group's 0..3, then the
  // full group's 5); 4 more find only the window group's 5 to evict.
  ASSERT_TRUE(kv->Reserve(9, 16).ok());
  EXPECT_FALSE(kv->Reserve(9, 24).ok()) << "pinned entries are not evicted";
  kv->Release(9);
  EXPECT_EQ(kv->Stats().layer_groups.cached_blocks, 6 + 1);
  EXPECT_EQ(kv->MatchPrefix(2, PrefixTokens(21)), 20);
  EXPECT_EQ(kv->counters().prefix_hits[static_cast<int>(Tier::kDevice)], 5);
  kv->Release(2);
  kv->UnpinAll();
  EXPECT_EQ(kv->num_pinned_blocks(), 0);
  EXPECT_EQ(kv->num_available_device_blocks(), 15);
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
}

}  // namespace
}  // namespace kvtier
