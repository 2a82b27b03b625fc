// Host-side planning of the CUDA backend: attention work items, batch splitting and the
// step metadata of grouped block tables. Runs without a GPU, but for the step planner's
// pinned buffer (skipped without one).
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/split_batch.h"
#include "backend/cuda/step_planner.h"
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

TEST(SplitBatchTest, PiecesKeepTheirChunksGroupTables) {
  std::vector<int32_t> a(10);
  std::vector<int32_t> full = {1, 2, 3, 4}, windowed = {7, 8};
  const std::vector<GroupKvTable> tables = {{0, full}, {2, windowed}};
  ForwardBatch batch;
  batch.chunks.push_back({a, 5, {}, true});
  batch.chunks.back().group_tables = tables;
  const auto pieces = SplitBatch(batch, /*max_tokens=*/4, /*max_chunks=*/2);
  ASSERT_EQ(pieces.size(), 3u);
  for (const ForwardBatch& piece : pieces) {
    ASSERT_EQ(piece.chunks[0].group_tables.size(), 2u);
    EXPECT_EQ(piece.chunks[0].group_tables.data(), tables.data());
  }
}

// A grouped step: one indptr array per group into one indices array, a windowed group's
// entries before its first block on the scratch block, padding chunks on it in every group;
// a decode step's arrays at the same offsets whatever its tables' lengths (graph replay).
TEST(StepPlannerTest, GroupTablesGetAnIndptrEachAndTheScratchBlockBeforeTheWindow) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) GTEST_SKIP() << "no CUDA device";
  StepPlanner::Shape shape;
  shape.capacity.max_tokens = 64;
  shape.capacity.max_chunks = 4;
  shape.capacity.max_table_entries = 4 * 8;
  shape.capacity.max_context = 32;
  shape.block_tokens = 4;
  shape.fast_attention = true;
  shape.prefill_tile_tokens = 64;
  shape.num_kv_heads = 2;
  shape.decode_wave_ctas = 132;
  shape.num_groups = 2;
  auto planner = StepPlanner::Create(shape, StepPlanner::MetaCapacity(shape.capacity, 0, 2));
  ASSERT_TRUE(planner.ok()) << planner.status();
  constexpr int32_t kScratch = 99;
  StepSpec spec;
  std::vector<int32_t> three = {1, 2, 3}, one = {4};
  // Chunk 0: positions 13..15 (blocks 0..3), group 1 from block 2; chunk 1: position 5
  // (blocks 0..1), group 1 from block 1.
  std::vector<int32_t> full0 = {10, 11, 12, 13}, win0 = {20, 21}, full1 = {30, 31}, win1 = {40};
  const std::vector<GroupKvTable> tables0 = {{0, full0}, {2, win0}}, tables1 = {{0, full1}, {1, win1}};
  ForwardBatch batch;
  batch.chunks.push_back({three, 13, {}, true});
  batch.chunks.back().group_tables = tables0;
  batch.chunks.push_back({one, 5, {}, true});
  batch.chunks.back().group_tables = tables1;
  absl::StatusOr<StepLaunch> step = (*planner)->Prepare(batch, /*padded_chunks=*/4, kScratch, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  const MetaLayout& m = step->meta;
  EXPECT_EQ(m.indptr_stride, AlignMetaBytes(5 * 4));
  auto ints = [&](size_t offset, int n) {
    const auto* p = reinterpret_cast<const int32_t*>((*planner)->meta_host() + offset);
    return std::vector<int32_t>(p, p + n);
  };
  EXPECT_EQ(ints(m.GroupIndptr(0), 5), (std::vector<int32_t>{0, 4, 6, 7, 8}));
  EXPECT_EQ(ints(m.GroupIndptr(1), 5), (std::vector<int32_t>{8, 12, 14, 15, 16}));
  EXPECT_EQ(ints(m.indices, 16), (std::vector<int32_t>{10, 11, 12, 13, 30, 31, kScratch, kScratch,  //
                                                        kScratch, kScratch, 20, 21, kScratch, 40, kScratch, kScratch}));
  EXPECT_LE(m.GroupIndptr(1) + m.indptr_stride, m.indices);

  // Decode steps of one bucket: the same offsets for short and long tables.
  auto decode_layout = [&](int64_t position, const std::vector<GroupKvTable>& tables) {
    ForwardBatch decode;
    decode.chunks.push_back({one, position, {}, true});
    decode.chunks.back().group_tables = tables;
    absl::StatusOr<StepLaunch> s = (*planner)->Prepare(decode, /*padded_chunks=*/2, kScratch, spec);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->meta : MetaLayout{};
  };
  const MetaLayout short_step = decode_layout(5, tables1);
  const MetaLayout long_step = decode_layout(15, tables0);
  EXPECT_EQ(short_step.indptr, long_step.indptr);
  EXPECT_EQ(short_step.indptr_stride, long_step.indptr_stride);
  EXPECT_EQ(short_step.indices, long_step.indices);
  EXPECT_EQ(short_step.rows, long_step.rows);
  EXPECT_LT(short_step.bytes, long_step.bytes);
}

}  // namespace
}  // namespace kvtier::cuda
