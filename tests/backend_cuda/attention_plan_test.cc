// Host-side planning of the CUDA backend: attention work items, batch splitting, the window
// arithmetic of grouped block tables and the step metadata they take. Runs without a GPU,
// but for the step planner's pinned buffer (skipped without one).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/split_batch.h"
#include "backend/cuda/step_planner.h"
#include "backend/cuda/window_table_span.h"
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

// The window arithmetic against every kernel's reads: a query at q of window W reads from
// its first key max(0, q - W + 1), which a kernel with tiles of T positions starts at the
// tile boundary at or below it (decode 16, mma.sync prefill 64, wgmma prefill 64 or 128; the
// generic kernel at the key: T = 1). No query of a chunk reads a block before
// WindowTableFirst, and the chunk's entries from there fit WindowTableEntries.
TEST(WindowTableSpanTest, CoversEveryKernelsReadsAndBoundsTheEntries) {
  EXPECT_EQ(WindowSlackBlocks(16), 8);
  EXPECT_EQ(WindowSlackBlocks(64), 2);
  EXPECT_EQ(WindowSlackBlocks(128), 1);
  EXPECT_EQ(WindowSlackBlocks(256), 1);
  EXPECT_EQ(WindowSlackBlocks(1), 127);
  for (int64_t bt : {1, 3, 4, 12, 16, 64, 100, 128, 256}) {
    for (int64_t window : {1, 5, 16, 100, 1024}) {
      for (int64_t n : {1, 7, 64, 200}) {
        for (int64_t start = 0; start < 1500; start += 7) {
          const int64_t first = WindowTableFirst(window, start, bt);
          const int64_t end = (start + n + bt - 1) / bt;
          for (int64_t tile : {1, 16, 64, 128}) {
            for (int64_t q = start; q < start + n; ++q) {
              const int64_t key = std::max<int64_t>(0, q - window + 1);
              ASSERT_GE(key / tile * tile / bt, first)
                  << "block_tokens " << bt << " window " << window << " tile " << tile << " query " << q;
            }
          }
          // The chunk's writes (its own positions) are inside the span too.
          ASSERT_GE(start / bt, first);
          ASSERT_LE(end - first, WindowTableEntries(window, n, bt))
              << "block_tokens " << bt << " window " << window << " start " << start << " tokens " << n;
        }
      }
    }
  }
}

StepCapacity GroupedCapacity(int64_t max_chunks, int64_t max_tokens, int64_t max_context, int64_t block_tokens) {
  StepCapacity c;
  c.max_tokens = max_tokens;
  c.max_chunks = max_chunks;
  c.max_context = max_context;
  c.max_table_entries = max_chunks * ((max_context + block_tokens - 1) / block_tokens);
  c.max_items = 4 * max_tokens;
  return c;
}

// The metadata of many one-layer windowed groups (Gemma 3's 5:1) at a long context: a
// windowed group's table is bounded by its window, not the context.
TEST(StepPlannerTest, WindowedGroupsMetadataIsBoundedByTheirWindow) {
  const StepCapacity capacity = GroupedCapacity(/*max_chunks=*/256, /*max_tokens=*/8192, /*max_context=*/32768, 16);
  std::vector<std::optional<int64_t>> windowed = {std::nullopt, 1024, 1024, 1024, 1024, 1024};
  const std::vector<std::optional<int64_t>> full(6, std::nullopt);
  // Every group a full table: six times one table, what every group used to take.
  EXPECT_EQ(StepPlanner::MaxTableEntries(capacity, full, 16), 6 * capacity.max_table_entries);
  // A windowed group takes under a twentieth of a full table; the tables together a fifth.
  const int64_t entries = StepPlanner::MaxTableEntries(capacity, windowed, 16);
  EXPECT_LT(20 * (entries - capacity.max_table_entries) / 5, capacity.max_table_entries) << entries;
  EXPECT_LE(5 * entries, 6 * capacity.max_table_entries) << entries;
  // The whole metadata (token, chunk and work arrays too) more than a third.
  const size_t bounded = StepPlanner::MetaCapacity(capacity, 0, windowed, 16);
  const size_t unbounded = StepPlanner::MetaCapacity(capacity, 0, full, 16);
  EXPECT_LE(3 * bounded, unbounded) << bounded << " vs " << unbounded;
  // Without groups: one table.
  EXPECT_EQ(StepPlanner::MaxTableEntries(capacity, {}, 16), capacity.max_table_entries);
  // A window past the context is a full table.
  windowed[1] = 1 << 20;
  EXPECT_EQ(StepPlanner::MaxTableEntries(capacity, windowed, 16),
            2 * capacity.max_table_entries + 4 * (entries - capacity.max_table_entries) / 5);
}

// A grouped step: one indptr array per group into one indices array. A windowed group's
// chunk holds the blocks from its WindowTableFirst on, those before the table's first block
// on the scratch block, and its indptr entry shifted (negative where the span starts past
// the entries before it); padding chunks on the scratch block in every group. A decode
// step's arrays sit at the same offsets whatever its tables' lengths (graph replay).
TEST(StepPlannerTest, GroupTablesGetAnIndptrEachAndOnlyTheWindowsBlocks) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kBt = 16, kWindow = 32;
  StepPlanner::Shape shape;
  shape.capacity = GroupedCapacity(4, 64, 8192, kBt);
  shape.block_tokens = kBt;
  shape.fast_attention = true;
  shape.prefill_tile_tokens = 64;
  shape.num_kv_heads = 2;
  shape.decode_wave_ctas = 132;
  shape.group_window = {kWindow, std::nullopt};  // group 0 windowed, group 1 full
  auto planner = StepPlanner::Create(shape, StepPlanner::MetaCapacity(shape.capacity, 0, shape.group_window, kBt));
  ASSERT_TRUE(planner.ok()) << planner.status();
  constexpr int32_t kS = 99;  // the scratch block
  StepSpec spec;
  auto ids = [](int32_t first, int32_t count) {
    std::vector<int32_t> v(static_cast<size_t>(count));
    std::iota(v.begin(), v.end(), first);
    return v;
  };
  std::vector<int32_t> three = {1, 2, 3}, one = {4};
  // Chunk 0: positions 325..327, blocks 0..20; its first key 294 is in block 18, 8 blocks
  // of slack (WindowSlackBlocks(16)) before it: the windowed span is blocks 10..20, its
  // table from 18. Chunk 1: position 200, blocks 0..12; first key 169 in block 10: the span
  // is blocks 2..12, of a table still holding every block from 0.
  const std::vector<int32_t> win0 = ids(218, 3), full0 = ids(100, 21), win1 = ids(400, 13), full1 = ids(300, 13);
  const std::vector<GroupKvTable> tables0 = {{18, win0}, {0, full0}}, tables1 = {{0, win1}, {0, full1}};
  ForwardBatch batch;
  batch.chunks.push_back({three, 325, {}, true});
  batch.chunks.back().group_tables = tables0;
  batch.chunks.push_back({one, 200, {}, true});
  batch.chunks.back().group_tables = tables1;
  absl::StatusOr<StepLaunch> step = (*planner)->Prepare(batch, /*padded_chunks=*/4, kS, spec);
  ASSERT_TRUE(step.ok()) << step.status();
  const MetaLayout& m = step->meta;
  EXPECT_EQ(m.indptr_stride, AlignMetaBytes(5 * 4));
  auto ints = [&](size_t offset, int n) {
    const auto* p = reinterpret_cast<const int32_t*>((*planner)->meta_host() + offset);
    return std::vector<int32_t>(p, p + n);
  };
  EXPECT_EQ(ints(m.GroupIndptr(0), 5), (std::vector<int32_t>{0 - 10, 11 - 2, 22, 23, 24}));
  EXPECT_EQ(ints(m.GroupIndptr(1), 5), (std::vector<int32_t>{24, 45, 58, 59, 60}));
  std::vector<int32_t> want(8, kS);                                        // chunk 0, group 0: blocks 10..17
  for (int32_t id : win0) want.push_back(id);                              // blocks 18..20
  for (int32_t id : ids(402, 11)) want.push_back(id);                      // chunk 1, group 0: blocks 2..12
  for (int32_t id : {kS, kS}) want.push_back(id);                          // the padding chunks
  for (const auto* full : {&full0, &full1}) want.insert(want.end(), full->begin(), full->end());
  for (int32_t id : {kS, kS}) want.push_back(id);
  EXPECT_EQ(ints(m.indices, 60), want);
  EXPECT_EQ(m.bytes, m.indices + AlignMetaBytes(60 * 4));
  EXPECT_LE(m.GroupIndptr(1) + m.indptr_stride, m.indices);

  // Decode steps of one bucket: the same offsets for short and long tables.
  auto decode_layout = [&](int64_t position, const std::vector<GroupKvTable>& tables) {
    ForwardBatch decode;
    decode.chunks.push_back({one, position, {}, true});
    decode.chunks.back().group_tables = tables;
    absl::StatusOr<StepLaunch> s = (*planner)->Prepare(decode, /*padded_chunks=*/2, kS, spec);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->meta : MetaLayout{};
  };
  // Position 4000: blocks 0..250, the window's from 248 (first key 3969), span from 240.
  const std::vector<int32_t> long_win = ids(1248, 3), long_full = ids(2000, 251);
  const MetaLayout short_step = decode_layout(200, tables1);
  const MetaLayout long_step = decode_layout(4000, {{248, long_win}, {0, long_full}});
  EXPECT_EQ(short_step.indptr, long_step.indptr);
  EXPECT_EQ(short_step.indptr_stride, long_step.indptr_stride);
  EXPECT_EQ(short_step.indices, long_step.indices);
  EXPECT_EQ(short_step.rows, long_step.rows);
  EXPECT_EQ(long_step.bytes, long_step.indices + AlignMetaBytes((11 + 1 + 251 + 1) * 4));
  EXPECT_LT(short_step.bytes, long_step.bytes);
  EXPECT_EQ(ints(long_step.GroupIndptr(0), 1), std::vector<int32_t>{0 - 240});
}

}  // namespace
}  // namespace kvtier::cuda
