// Two backends stepped through one ragged scenario on the same block ids, the first as the
// reference: prefills (one chunked), a mixed step with a prefix hit, then decodes of 4, 1 and
// 2 rows, each logits row compared (relative error within a tolerance, argmax flips only at
// near ties) and the reference's greedy token appended. Shared by the CUDA-against-CPU
// backend tests and the CPU's own format tests. gtest assertions; call from test bodies.
#ifndef KVTIER_TESTS_TESTING_BACKEND_SCENARIO_H_
#define KVTIER_TESTS_TESTING_BACKEND_SCENARIO_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "gtest/gtest.h"
#include "testing/relative_error.h"

namespace kvtier::testing {

inline int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Sequences sharing one block-id space on both backends.
struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
  int64_t cached = 0;
};
struct Feed {
  int seq;
  int64_t count;  // tokens to feed from seq.tokens[cached]
  bool logits;
};

struct ScenarioStats {
  double tolerance = 3e-2;  // of each logits row's relative error
  // When above tolerance: rows between the two are counted as outliers instead of failing
  // (mixture-of-experts models, where a route whose top-k router logits nearly tie flips
  // under 16-bit activations and moves that row, and the rows whose attention reads its K/V,
  // by up to ~0.4; a wrong scale or layout moves every row by ~1). 0: no outliers.
  double outlier_tolerance = 0;
  double max_rel_error = 0;
  int rows = 0;
  int outliers = 0;
  int argmax_mismatch = 0;
};

// Runs one step on both backends (`cpu` the reference), checks logits, advances the sequences and appends the
// CPU's greedy token to every sequence that got logits.
inline void StepBoth(Backend& cpu, Backend& gpu, std::vector<Seq>& seqs, const std::vector<Feed>& feeds,
                     ScenarioStats* stats) {
  ForwardBatch batch;
  for (const Feed& f : feeds) {
    Seq& s = seqs[f.seq];
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(s.tokens).subspan(s.cached, f.count);
    c.start_position = s.cached;
    c.block_table = s.table;
    c.need_logits = f.logits;
    batch.chunks.push_back(c);
  }
  std::vector<float> ref, got;
  ASSERT_TRUE(cpu.Forward(batch, &ref).ok());
  absl::Status st = gpu.Forward(batch, &got);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(ref.size(), got.size());
  const int64_t vocab = cpu.vocab_size();
  int row = 0;
  std::vector<int32_t> next;
  for (const Feed& f : feeds) {
    if (!f.logits) continue;
    const std::vector<float> r(ref.begin() + row * vocab, ref.begin() + (row + 1) * vocab);
    const std::vector<float> g(got.begin() + row * vocab, got.begin() + (row + 1) * vocab);
    const double err = RelativeError(g, r);
    stats->max_rel_error = std::max(stats->max_rel_error, err);
    const bool outlier = err >= stats->tolerance && err < stats->outlier_tolerance;
    if (outlier) {
      ++stats->outliers;
    } else {
      EXPECT_LT(err, stats->tolerance) << "seq " << f.seq << " at " << seqs[f.seq].cached;
    }
    const int32_t a = Argmax(r.data(), vocab), b = Argmax(g.data(), vocab);
    if (a != b && !outlier) {
      ++stats->argmax_mismatch;
      // Only a near tie may flip: the CPU's margin must be within the error allowed.
      EXPECT_LT(std::abs(r[a] - r[b]), std::max(0.05, stats->tolerance) * (std::abs(r[a]) + 1))
          << "argmax " << a << " vs " << b;
    }
    ++stats->rows;
    next.push_back(a);
    ++row;
  }
  row = 0;
  for (const Feed& f : feeds) {
    Seq& s = seqs[f.seq];
    s.cached += f.count;
    if (f.logits && s.cached == static_cast<int64_t>(s.tokens.size())) s.tokens.push_back(next[row]);
    if (f.logits) ++row;
  }
}

// The scenario on 40 blocks of each backend's pool (allocated here), tokens and block ids
// drawn from `rng`; the sequences as they end in *out.
inline ScenarioStats RunScenario(std::mt19937& rng, Backend& cpu, Backend& gpu, int64_t vocab,
                                 std::vector<Seq>* out, double tolerance, double outlier_tolerance = 0) {
  const int kBlocks = 40;
  EXPECT_TRUE(cpu.AllocateKvPool(kBlocks).ok());
  EXPECT_TRUE(gpu.AllocateKvPool(kBlocks).ok());
  std::vector<int32_t> ids(kBlocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  std::vector<Seq> seqs(4);
  const int lengths[4] = {20, 7, 33, 0};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < lengths[i]; ++j) seqs[i].tokens.push_back(tok(rng));
    seqs[i].table.assign(ids.begin() + i * 6, ids.begin() + (i + 1) * 6);
  }
  // D shares A's first (full) block: its first 16 tokens are A's.
  seqs[3].tokens.assign(seqs[0].tokens.begin(), seqs[0].tokens.begin() + 16);
  for (int j = 0; j < 5; ++j) seqs[3].tokens.push_back(tok(rng));
  seqs[3].table[0] = seqs[0].table[0];
  seqs[3].cached = 16;

  ScenarioStats stats;
  stats.tolerance = tolerance;
  stats.outlier_tolerance = outlier_tolerance;
  StepBoth(cpu, gpu, seqs, {{0, 20, true}, {1, 4, false}, {2, 33, true}}, &stats);
  StepBoth(cpu, gpu, seqs, {{0, 1, true}, {1, 3, true}, {2, 1, true}, {3, 5, true}}, &stats);
  for (int i = 0; i < 5; ++i) {
    StepBoth(cpu, gpu, seqs, {{0, 1, true}, {1, 1, true}, {2, 1, true}, {3, 1, true}}, &stats);
  }
  // Decode steps of 1 and 2 rows (on CUDA the GEMV path, and on the fast path the fused
  // gate|up GEMV, instead of cuBLAS).
  for (int i = 0; i < 2; ++i) {
    StepBoth(cpu, gpu, seqs, {{0, 1, true}}, &stats);
    StepBoth(cpu, gpu, seqs, {{1, 1, true}, {2, 1, true}}, &stats);
  }
  if (out != nullptr) *out = seqs;
  return stats;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_BACKEND_SCENARIO_H_
