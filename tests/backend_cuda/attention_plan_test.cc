// Host-side planning of the CUDA backend: attention work items and batch splitting.
// Runs without a GPU.
#include <map>
#include <tuple>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/split_batch.h"
#include "gtest/gtest.h"

namespace kvtier::cuda {
namespace {

// Every (token, query head) must see each KV position <= its own exactly once across its
// items, and split partial slots must be disjoint.
void CheckCoverage(const std::vector<ChunkShape>& chunks, const AttentionPlanOptions& o,
                   const AttentionPlan& plan) {
  const int group = o.num_heads / o.num_kv_heads;
  std::vector<int64_t> pos, chunk_of;
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (int i = 0; i < chunks[c].num_tokens; ++i) {
      pos.push_back(chunks[c].start_position + i);
      chunk_of.push_back(static_cast<int64_t>(c));
    }
  }
  // (token, group head) -> number of times each position is covered.
  std::map<std::pair<int, int>, std::vector<int>> seen;
  std::map<std::pair<int, int>, std::vector<int>> splits_seen;
  for (const AttentionItem& item : plan.items) {
    ASSERT_GT(item.num_tokens, 0);
    ASSERT_LE(item.num_tokens * item.group_count, plan.max_rows);
    for (int qi = 0; qi < item.num_tokens; ++qi) {
      const int t = item.token_begin + qi;
      ASSERT_EQ(chunk_of[t], item.chunk);
      for (int g = item.group_begin; g < item.group_begin + item.group_count; ++g) {
        auto& cover = seen[{t, g}];
        cover.resize(pos[t] + 1, 0);
        for (int p = item.kv_begin; p < item.kv_end; ++p) {
          if (p <= pos[t]) ++cover[p];
        }
        splits_seen[{t, g}].push_back(item.split);
      }
    }
  }
  std::vector<int> slot_use(plan.slots_used, 0);
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int g = 0; g < group; ++g) {
      const auto& cover = seen[{static_cast<int>(t), g}];
      ASSERT_EQ(cover.size(), static_cast<size_t>(pos[t] + 1)) << "token " << t;
      for (int c : cover) ASSERT_EQ(c, 1) << "token " << t << " head " << g;
      EXPECT_EQ((splits_seen[{static_cast<int>(t), g}].size()),
                static_cast<size_t>(plan.num_splits[t]));
    }
    if (plan.num_splits[t] > 1) {
      for (int s = 0; s < plan.num_splits[t]; ++s) ++slot_use[plan.partial_base[t] + s];
    }
  }
  for (int u : slot_use) EXPECT_EQ(u, 1);
  EXPECT_LE(plan.slots_used, o.partial_slots);
}

TEST(AttentionPlanTest, CoversEveryPositionOnceForMixedBatches) {
  const std::vector<ChunkShape> chunks = {{1, 3000}, {37, 0}, {20, 50}, {1, 4}, {5, 300}};
  for (auto [heads, kv_heads, max_rows] :
       {std::tuple{8, 2, 16}, std::tuple{4, 4, 16}, std::tuple{32, 1, 16},
        std::tuple{12, 4, 8}, std::tuple{24, 8, 16}}) {
    AttentionPlanOptions o;
    o.num_heads = heads;
    o.num_kv_heads = kv_heads;
    o.max_rows = max_rows;
    o.split_tokens = 64;
    o.partial_slots = 100000;
    AttentionPlan plan;
    ASSERT_TRUE(PlanAttention(chunks, o, &plan).ok());
    EXPECT_TRUE(plan.any_split);
    EXPECT_EQ(plan.split_tokens, 64);
    CheckCoverage(chunks, o, plan);
  }
}

TEST(AttentionPlanTest, SplitLengthGrowsToFitPartialCapacity) {
  const std::vector<ChunkShape> chunks = {{1, 10000}, {1, 20000}};
  AttentionPlanOptions o;
  o.num_heads = 8;
  o.num_kv_heads = 2;
  o.split_tokens = 256;
  o.partial_slots = 40;
  AttentionPlan plan;
  ASSERT_TRUE(PlanAttention(chunks, o, &plan).ok());
  EXPECT_GT(plan.split_tokens, 256);
  CheckCoverage(chunks, o, plan);
}

TEST(AttentionPlanTest, ShortContextsDoNotSplit) {
  const std::vector<ChunkShape> chunks = {{1, 10}, {16, 0}};
  AttentionPlanOptions o;
  o.num_heads = 8;
  o.num_kv_heads = 2;
  o.partial_slots = 10;
  AttentionPlan plan;
  ASSERT_TRUE(PlanAttention(chunks, o, &plan).ok());
  EXPECT_FALSE(plan.any_split);
  EXPECT_EQ(plan.slots_used, 0);
  // Group of 4 heads, 16 rows per CTA: 4 tokens per tile -> 1 + 4 items.
  EXPECT_EQ(plan.items.size(), 5u);
  EXPECT_EQ(plan.max_rows, 16);
  CheckCoverage(chunks, o, plan);
}

TEST(SplitBatchTest, CutsLongChunksIntoConsecutivePieces) {
  std::vector<int32_t> a(10), b(3), c(1);
  for (int i = 0; i < 10; ++i) a[i] = i;
  std::vector<int32_t> table = {7, 8, 9};
  ForwardBatch batch;
  batch.chunks.push_back({a, 5, table, true});
  batch.chunks.push_back({b, 0, table, false});
  batch.chunks.push_back({c, 9, table, true});
  const auto pieces = SplitBatch(batch, /*max_tokens=*/4, /*max_chunks=*/2);
  // Tokens: a0-3 | a4-7 | a8-9 b0-1 | b2 c0.
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].chunks.size(), 1u);
  EXPECT_EQ(pieces[0].chunks[0].start_position, 5);
  EXPECT_FALSE(pieces[0].chunks[0].need_logits);
  EXPECT_EQ(pieces[1].chunks[0].start_position, 9);
  EXPECT_EQ(pieces[1].chunks[0].tokens[0], 4);
  ASSERT_EQ(pieces[2].chunks.size(), 2u);
  EXPECT_EQ(pieces[2].chunks[0].start_position, 13);
  EXPECT_TRUE(pieces[2].chunks[0].need_logits);
  EXPECT_EQ(pieces[2].chunks[1].tokens.size(), 2u);
  EXPECT_FALSE(pieces[2].chunks[1].need_logits);
  ASSERT_EQ(pieces[3].chunks.size(), 2u);
  EXPECT_EQ(pieces[3].chunks[0].start_position, 2);
  EXPECT_TRUE(pieces[3].chunks[1].need_logits);
  EXPECT_EQ(pieces[3].chunks[1].block_table.size(), 3u);
}

}  // namespace
}  // namespace kvtier::cuda
