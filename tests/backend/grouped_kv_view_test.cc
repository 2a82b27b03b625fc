// The CPU attention over a layer group's blocks (kv_block_view.h first_block, kv/
// grouped_block_tables.h): a full-attention layer and a windowed one, written and read in
// chunks through one pool of per-group blocks, windowed ones dropped and reused as the
// sequence advances, give bit for bit what the one-group layout (every layer in every
// block, nothing dropped) gives, in fp32 and fp8 KV, with and without a soft cap.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kv_block_view.h"
#include "gtest/gtest.h"
#include "kv/grouped_block_tables.h"
#include "kv/kv_layer_groups.h"

namespace kvtier {
namespace {

KvLayout Layout(int64_t num_layers, DType dtype) {
  KvLayout l;
  l.num_layers = num_layers;
  l.num_kv_heads = 2;
  l.head_dim = 8;
  l.block_tokens = 4;
  l.dtype = dtype;
  return l;
}

// A pool of `blocks` blocks whose bytes are NaN where they are f32 (any read of a position
// never written poisons the output).
std::vector<uint8_t> PoisonedPool(const KvLayout& layout, int64_t blocks) {
  std::vector<uint8_t> pool(static_cast<size_t>(blocks) * layout.BlockBytes(), 0xFF);
  return pool;
}

void ExpectSameAttentionAsOneGroup(DType dtype, std::optional<float> softcap) {
  constexpr int64_t kPositions = 45, kChunk = 3, kWindow = 6, kHeads = 4;
  const std::vector<std::optional<int64_t>> windows = {std::nullopt, kWindow};
  absl::StatusOr<KvLayerGroups> groups = KvLayerGroups::Create(windows, 4, true);
  ASSERT_TRUE(groups.ok());
  const int64_t all_blocks = (kPositions + 3) / 4;
  // The pool holds only the peak, so dropped windowed blocks come back for later positions.
  const int64_t pool_blocks = groups->SequencePeakBlocks(kPositions, kChunk);
  ASSERT_LT(pool_blocks, 2 * all_blocks);
  absl::StatusOr<GroupedBlockTables> tables = GroupedBlockTables::Create(*groups, pool_blocks);
  ASSERT_TRUE(tables.ok());

  const KvLayout whole = Layout(2, dtype), one_layer = Layout(1, dtype);
  std::vector<uint8_t> whole_pool = PoisonedPool(whole, all_blocks);
  std::vector<int32_t> whole_table(static_cast<size_t>(all_blocks));
  for (int64_t j = 0; j < all_blocks; ++j) whole_table[static_cast<size_t>(j)] = static_cast<int32_t>(all_blocks - 1 - j);
  std::vector<uint8_t> group_pool = PoisonedPool(one_layer, pool_blocks);

  AttentionOptions options[2];
  options[1].window = kWindow;
  for (AttentionOptions& o : options) o.logit_softcap = softcap;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist;
  const int64_t kv_row = whole.num_kv_heads * whole.head_dim, q_row = kHeads * whole.head_dim;
  for (int64_t start = 0; start < kPositions; start += kChunk) {
    const int64_t rows = std::min(kChunk, kPositions - start);
    ASSERT_TRUE(tables->Reserve(1, start + rows).ok());
    for (int64_t layer = 0; layer < 2; ++layer) {
      std::vector<float> k(static_cast<size_t>(rows * kv_row)), v(k.size()), q(static_cast<size_t>(rows * q_row));
      for (float& e : k) e = dist(rng);
      for (float& e : v) e = dist(rng);
      for (float& e : q) e = dist(rng);
      const GroupBlockTable& t = tables->Table(1, groups->GroupOfLayer(layer));
      KvBlockView grouped{&one_layer, group_pool.data(), t.blocks, {}, std::nullopt};
      grouped.first_block = t.first_block;
      const KvBlockView one_group{&whole, whole_pool.data(), whole_table, {}, std::nullopt};
      WriteKv(grouped, groups->IndexInGroup(layer), start, rows, k.data(), v.data());
      WriteKv(one_group, layer, start, rows, k.data(), v.data());
      std::vector<float> want(q.size()), got(q.size());
      PagedAttention(one_group, layer, start, rows, kHeads, q.data(), want.data(), nullptr, options[layer]);
      PagedAttention(grouped, groups->IndexInGroup(layer), start, rows, kHeads, q.data(), got.data(), nullptr,
                     options[layer]);
      for (float e : want) ASSERT_FALSE(std::isnan(e));
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "layer " << layer << " positions " << start << ".." << start + rows;
    }
    tables->OnComputed(1, start + rows);
    ASSERT_TRUE(tables->VerifyIntegrity().ok());
  }
  const GroupedBlockStats s = tables->Stats();
  EXPECT_EQ(s.group_blocks[0], all_blocks);
  EXPECT_LT(s.group_blocks[1], all_blocks);
  EXPECT_GT(s.used_blocks + s.blocks_dropped_for_window, pool_blocks);  // dropped blocks were handed out again
}

TEST(GroupedKvViewTest, Fp32AttentionMatchesOneGroupBitForBit) { ExpectSameAttentionAsOneGroup(DType::kF32, std::nullopt); }

TEST(GroupedKvViewTest, SoftCappedAttentionMatchesOneGroupBitForBit) {
  ExpectSameAttentionAsOneGroup(DType::kF32, 2.5f);
}

TEST(GroupedKvViewTest, Fp8AttentionMatchesOneGroupBitForBit) {
  ExpectSameAttentionAsOneGroup(DType::kF8E4M3, std::nullopt);
}

}  // namespace
}  // namespace kvtier
