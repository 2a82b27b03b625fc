// Layer groups and their block tables (kv/kv_layer_groups.h, kv/grouped_block_tables.h):
// the grouping of a Gemma-shaped model, the window arithmetic checked position by position,
// a 32k-position context holding the stated fraction of full-attention KV with the stats
// showing it, admission fitting more windowed sequences into the same budget (and those
// sequences then running in it), prefix reuse needing the whole window, and the invariant
// under random operations.
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kv/grouped_block_tables.h"
#include "kv/kv_layer_groups.h"

namespace kvtier {
namespace {

// Gemma 3's pattern: five local layers of `window`, then a global one, repeated.
std::vector<std::optional<int64_t>> Gemma3Windows(int64_t num_layers, int64_t window) {
  std::vector<std::optional<int64_t>> w(static_cast<size_t>(num_layers), window);
  for (int64_t l = 5; l < num_layers; l += 6) w[static_cast<size_t>(l)] = std::nullopt;
  return w;
}

KvLayerGroups MustCreate(const std::vector<std::optional<int64_t>>& windows, int64_t block_tokens, bool grouped) {
  absl::StatusOr<KvLayerGroups> g = KvLayerGroups::Create(windows, block_tokens, grouped);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

// The first block holding a position a query at `p` or later reads, counted position by
// position rather than by the division the code uses.
int64_t FirstReadBlock(int64_t p, std::optional<int64_t> window, int64_t block_tokens) {
  if (!window) return 0;
  for (int64_t b = 0;; ++b) {
    for (int64_t pos = b * block_tokens; pos < (b + 1) * block_tokens; ++pos) {
      if (pos > p - *window) return b;  // (p - W, p]
    }
  }
}

TEST(KvLayerGroupsTest, CutsFullAttentionThenEachWindowIntoEqualGroups) {
  // Gemma 3: 2 global and 10 local layers, groups of two layers.
  KvLayerGroups g3 = MustCreate(Gemma3Windows(12, 1024), 16, true);
  ASSERT_EQ(g3.num_groups(), 6);
  EXPECT_EQ(g3.layers_per_group(), 2);
  EXPECT_EQ(g3.group(0).layers, (std::vector<int64_t>{5, 11}));
  EXPECT_FALSE(g3.group(0).window.has_value());
  EXPECT_EQ(g3.group(3).layers, (std::vector<int64_t>{4, 6}));
  for (int64_t i = 1; i < 6; ++i) EXPECT_EQ(g3.group(i).window, 1024);
  EXPECT_EQ(g3.GroupOfLayer(11), 0);
  EXPECT_EQ(g3.IndexInGroup(11), 1);
  EXPECT_EQ(g3.GroupOfLayer(6), 3);
  EXPECT_EQ(g3.IndexInGroup(6), 1);
  EXPECT_EQ(g3.GroupOfLayer(7), 4);
  EXPECT_EQ(g3.IndexInGroup(7), 0);

  // Gemma 2: local and global layers alternate, groups of half the layers.
  std::vector<std::optional<int64_t>> g2w(8, std::nullopt);
  for (size_t l = 0; l < g2w.size(); l += 2) g2w[l] = 4096;
  KvLayerGroups g2 = MustCreate(g2w, 16, true);
  ASSERT_EQ(g2.num_groups(), 2);
  EXPECT_EQ(g2.group(0).layers, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(g2.group(1).layers, (std::vector<int64_t>{0, 2, 4, 6}));

  // Two windows and one global layer: one layer a group, full attention first.
  std::vector<std::optional<int64_t>> mixed = {512, std::nullopt, 1024, 1024};
  KvLayerGroups m = MustCreate(mixed, 16, true);
  ASSERT_EQ(m.num_groups(), 4);
  EXPECT_EQ(m.group(0).layers, (std::vector<int64_t>{1}));
  EXPECT_EQ(m.group(1).window, 512);
  EXPECT_EQ(m.group(3).layers, (std::vector<int64_t>{3}));

  KvLayerGroups one = MustCreate(Gemma3Windows(12, 1024), 16, false);
  ASSERT_EQ(one.num_groups(), 1);
  EXPECT_EQ(one.layers_per_group(), 12);
  EXPECT_FALSE(one.group(0).window.has_value());
  EXPECT_EQ(one.IndexInGroup(7), 7);
}

TEST(KvLayerGroupsTest, RefusesNoLayersBadWindowsAndBadBlocks) {
  EXPECT_EQ(KvLayerGroups::Create({}, 16, true).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::optional<int64_t>> zero = {std::nullopt, int64_t{0}};
  absl::Status st = KvLayerGroups::Create(zero, 16, true).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer 1"), std::string_view::npos) << st;
  EXPECT_FALSE(KvLayerGroups::Create(Gemma3Windows(6, 8), 0, true).ok());
}

TEST(KvLayerGroupsTest, FirstLiveBlockIsTheFirstBlockAQueryStillReads) {
  for (int64_t block : {1, 4, 16}) {
    for (int64_t window : {1, 3, 4, 16, 17, 40}) {
      KvLayerGroups g = MustCreate({std::nullopt, window}, block, true);
      for (int64_t p = 0; p < 120; ++p) {
        EXPECT_EQ(g.FirstLiveBlock(0, p), 0);
        EXPECT_EQ(g.FirstLiveBlock(1, p), FirstReadBlock(p, window, block)) << block << " " << window << " " << p;
      }
    }
  }
}

// Drives one sequence of `num_tokens` through the tables in chunks, as the engine does:
// reserve the chunk, compute it, report it. Returns the peak blocks per group.
std::vector<int64_t> RunSequence(GroupedBlockTables& t, SequenceId seq, int64_t num_tokens, int64_t chunk) {
  std::vector<int64_t> peak(static_cast<size_t>(t.groups().num_groups()));
  for (int64_t done = 0; done < num_tokens;) {
    const int64_t next = std::min(num_tokens, done + chunk);
    EXPECT_TRUE(t.Reserve(seq, next).ok());
    for (size_t g = 0; g < peak.size(); ++g) {
      peak[g] = std::max<int64_t>(peak[g], static_cast<int64_t>(t.Table(seq, static_cast<int64_t>(g)).blocks.size()));
    }
    t.OnComputed(seq, next);
    done = next;
  }
  return peak;
}

TEST(GroupedBlockTablesTest, Gemma3ContextAt32kHoldsTheWindowedFraction) {
  constexpr int64_t kTokens = 32768, kWindow = 1024, kBlock = 16, kChunk = 512, kLayers = 6;
  KvLayerGroups groups = MustCreate(Gemma3Windows(kLayers, kWindow), kBlock, true);
  ASSERT_EQ(groups.num_groups(), kLayers);  // one layer a group
  const int64_t all_blocks = kTokens / kBlock;
  absl::StatusOr<GroupedBlockTables> t = GroupedBlockTables::Create(groups, kLayers * all_blocks);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int64_t> peak = RunSequence(*t, 1, kTokens, kChunk);
  ASSERT_TRUE(t->VerifyIntegrity().ok()) << t->VerifyIntegrity();

  // The next query (position kTokens) reads from kTokens - kWindow + 1 on.
  const int64_t local_kept = all_blocks - FirstReadBlock(kTokens, kWindow, kBlock);
  EXPECT_EQ(local_kept, kWindow / kBlock);
  const GroupedBlockStats s = t->Stats();
  EXPECT_EQ(s.group_blocks[0], all_blocks);
  for (int64_t g = 1; g < kLayers; ++g) EXPECT_EQ(s.group_blocks[static_cast<size_t>(g)], local_kept);
  EXPECT_EQ(s.used_blocks, all_blocks + 5 * local_kept);
  EXPECT_EQ(s.full_attention_blocks, kLayers * all_blocks);
  EXPECT_EQ(s.blocks_dropped_for_window, 5 * (all_blocks - local_kept));
  const double fraction = static_cast<double>(s.used_blocks) / static_cast<double>(s.full_attention_blocks);
  EXPECT_NEAR(fraction, 1.0 / 6 + 5.0 / 6 * kWindow / kTokens, 1e-12);
  // The admission need bounds what the run held, and is reached within a block a group.
  EXPECT_EQ(peak[0], groups.PeakBlocks(0, kTokens, kChunk));
  for (int64_t g = 1; g < kLayers; ++g) {
    EXPECT_LE(peak[static_cast<size_t>(g)], groups.PeakBlocks(g, kTokens, kChunk));
    EXPECT_GE(peak[static_cast<size_t>(g)], groups.PeakBlocks(g, kTokens, kChunk) - 1);
  }
  EXPECT_LE(s.peak_blocks, groups.SequencePeakBlocks(kTokens, kChunk));

  t->Release(1);
  EXPECT_EQ(t->Stats().used_blocks, 0);
  EXPECT_TRUE(t->VerifyIntegrity().ok());
}

// Admits sequences of `num_tokens` while the pool has room for one more at its peak, then
// runs them all in lock step, every chunk of each reserved before any is computed.
int64_t AdmitAndRun(const KvLayerGroups& groups, int64_t layer_blocks, int64_t num_tokens, int64_t chunk) {
  const int64_t pool = layer_blocks / groups.layers_per_group();
  absl::StatusOr<GroupedBlockTables> t = GroupedBlockTables::Create(groups, pool);
  EXPECT_TRUE(t.ok()) << t.status();
  const int64_t admitted = pool / groups.SequencePeakBlocks(num_tokens, chunk);
  for (int64_t done = 0; done < num_tokens; done += chunk) {
    for (SequenceId s = 0; s < admitted; ++s) {
      EXPECT_TRUE(t->Reserve(s, std::min(num_tokens, done + chunk)).ok()) << "sequence " << s << " at " << done;
    }
    for (SequenceId s = 0; s < admitted; ++s) t->OnComputed(s, std::min(num_tokens, done + chunk));
  }
  EXPECT_TRUE(t->VerifyIntegrity().ok()) << t->VerifyIntegrity();
  return admitted;
}

TEST(GroupedBlockTablesTest, AdmissionFitsMoreWindowedSequencesInTheSameBudget) {
  constexpr int64_t kTokens = 32768, kWindow = 1024, kBlock = 16, kChunk = 512, kLayers = 6;
  const std::vector<std::optional<int64_t>> windows = Gemma3Windows(kLayers, kWindow);
  const int64_t budget = 2 * kLayers * (kTokens / kBlock);  // layer-blocks of two full-attention contexts
  const int64_t ungrouped = AdmitAndRun(MustCreate(windows, kBlock, false), budget, kTokens, kChunk);
  const int64_t grouped = AdmitAndRun(MustCreate(windows, kBlock, true), budget, kTokens, kChunk);
  EXPECT_EQ(ungrouped, 2);
  // Each grouped sequence needs its global blocks plus five layers of a window and a chunk.
  const int64_t local_peak = (kWindow - 1 + kChunk - 1) / kBlock + 2;
  EXPECT_EQ(grouped, budget / (kTokens / kBlock + 5 * local_peak));
  EXPECT_GT(grouped, 4 * ungrouped);
}

TEST(GroupedBlockTablesTest, ReserveIsAllOrNothingAcrossGroups) {
  KvLayerGroups groups = MustCreate(Gemma3Windows(6, 32), 16, true);
  absl::StatusOr<GroupedBlockTables> t = GroupedBlockTables::Create(groups, 17);
  ASSERT_TRUE(t.ok());
  absl::Status st = t->Reserve(1, 48);  // three blocks in each of six groups
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("needs 18 blocks"), std::string_view::npos) << st;
  EXPECT_EQ(t->num_free(), 17);
  EXPECT_EQ(t->NewBlocksNeeded(1, 32), 12);
  ASSERT_TRUE(t->Reserve(1, 32).ok());
  EXPECT_EQ(t->num_free(), 5);
  EXPECT_TRUE(t->VerifyIntegrity().ok());
  EXPECT_FALSE(GroupedBlockTables::Create(groups, -1).ok());
}

TEST(KvLayerGroupsTest, PrefixReuseNeedsEveryBlockTheNextQueryReads) {
  constexpr int64_t kBlock = 16, kWindow = 32;
  KvLayerGroups g = MustCreate({std::nullopt, kWindow}, kBlock, true);
  // A cached chain of 10 blocks whose local blocks before block 6 were dropped.
  auto dropped_front = [](int64_t group, int64_t block) { return group == 0 || block >= 6; };
  EXPECT_EQ(g.UsablePrefixBlocks(10, dropped_front), 10);  // its next query reads blocks 8, 9
  // A prompt sharing 7 blocks: its next query (position 112) reads from 81, block 5, dropped;
  // a shorter reuse reads further back still.
  EXPECT_EQ(g.UsablePrefixBlocks(7, dropped_front), 0);
  EXPECT_EQ(g.UsablePrefixBlocks(7, [](int64_t, int64_t) { return true; }), 7);
  // Local blocks past 8 absent (never computed by the sequence that cached them).
  auto short_local = [](int64_t group, int64_t block) { return group == 0 || (block >= 2 && block < 8); };
  EXPECT_EQ(g.UsablePrefixBlocks(10, short_local), 8);
  // A global hole caps the reuse before it.
  auto global_hole = [](int64_t group, int64_t block) { return group == 1 || block != 4; };
  EXPECT_EQ(g.UsablePrefixBlocks(10, global_hole), 4);
  // Checked against the positions each reuse length's next query reads.
  for (int64_t first_held = 0; first_held < 8; ++first_held) {
    auto held = [&](int64_t group, int64_t block) { return group == 0 || block >= first_held; };
    int64_t want = 0;
    for (int64_t n = 10; n > 0 && want == 0; --n) {
      bool ok = true;
      for (int64_t pos = std::max<int64_t>(0, n * kBlock - kWindow + 1); pos < n * kBlock; ++pos) {
        ok = ok && pos / kBlock >= first_held;
      }
      if (ok) want = n;
    }
    EXPECT_EQ(g.UsablePrefixBlocks(10, held), want) << first_held;
  }
}

TEST(GroupedBlockTablesTest, InvariantHoldsUnderRandomOperations) {
  KvLayerGroups groups = MustCreate(Gemma3Windows(12, 40), 8, true);
  absl::StatusOr<GroupedBlockTables> t = GroupedBlockTables::Create(groups, 200);
  ASSERT_TRUE(t.ok());
  std::mt19937 rng(7);
  std::vector<int64_t> computed(6), reserved(6);
  for (int op = 0; op < 3000; ++op) {
    const SequenceId s = static_cast<SequenceId>(rng() % 6);
    const size_t i = static_cast<size_t>(s);
    switch (rng() % 4) {
      case 0:
      case 1: {  // reserve a chunk, then compute it when it fits
        const int64_t next = computed[i] + 1 + static_cast<int64_t>(rng() % 30);
        if (t->Reserve(s, next).ok()) {
          reserved[i] = std::max(reserved[i], next);
          computed[i] = next;
          t->OnComputed(s, next);
        }
        break;
      }
      case 2:  // compute part of what is reserved
        computed[i] = std::max(computed[i], reserved[i] - static_cast<int64_t>(rng() % 5));
        t->OnComputed(s, computed[i]);
        break;
      default:
        if (rng() % 4 == 0) {
          t->Release(s);
          computed[i] = reserved[i] = 0;
        }
    }
    ASSERT_TRUE(t->VerifyIntegrity().ok()) << op << ": " << t->VerifyIntegrity();
    for (int64_t g = 0; g < groups.num_groups(); ++g) {
      const GroupBlockTable& table = t->Table(s, g);
      EXPECT_EQ(table.first_block, std::min(groups.FirstLiveBlock(g, computed[i]), groups.BlocksForTokens(reserved[i])));
    }
  }
}

}  // namespace
}  // namespace kvtier
