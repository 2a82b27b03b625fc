// DecodeAttention (backend/cuda/decode_attention.h) against an fp64 host reference on
// shuffled paged blocks, fresh random inputs and NaN-poisoned outputs, bf16 and fp16; and a
// CUDA-graph replay test (positions, tables and q change in device memory between replays).
// Its timings are in kvtier_cuda_bench (decode_attention_bench.cc).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kernels.h"
#include "backend/kv_layout.h"
#include "cuda_test_util.h"
#include "decode_world.h"
#include "gtest/gtest.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::DecodeWorld;
using cuda_test::DeviceDecode;
using cuda_test::kDefaultLaunch;
using cuda_test::SmCount;
using cuda_test::Random16;
using cuda_test::RelativeError;
using cuda_test::ToF32;
using cuda_test::Tolerance;
constexpr uint16_t kPoisonBits = 0xFFFF;

// fp64 reference of decode row i: (num_heads, head_dim); the pool holds T elements. Scores
// as `scores` says (the CPU backend's order: scale, then soft-cap; a window's keys only).
template <typename T>
std::vector<float> Reference(const DecodeWorld& w, const std::vector<uint16_t>& pool,
                             const std::vector<float>& q, int layer, int i, AttentionScores scores) {
  const KvLayout& L = w.layout;
  const int d = static_cast<int>(L.head_dim), bt = static_cast<int>(L.block_tokens);
  const int group = w.num_heads / static_cast<int>(L.num_kv_heads);
  const int ctx = w.contexts[i];
  const int64_t epb = L.ElementsPerBlock();
  const int32_t* table = w.indices.data() + w.indptr[i];
  const double scale = scores.scale > 0.0f ? scores.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const double cap = scores.logit_softcap;
  const int first = scores.window > 0 ? std::max(0, ctx - scores.window) : 0;
  std::vector<float> out(static_cast<size_t>(w.num_heads) * d);
  std::vector<double> score(ctx), acc(d);
  for (int h = 0; h < w.num_heads; ++h) {
    const int kvh = h / group;
    const float* qh = q.data() + (static_cast<int64_t>(w.rows[i]) * w.num_heads + h) * d;
    double mx = -INFINITY;
    for (int j = first; j < ctx; ++j) {
      const uint16_t* k = pool.data() + table[j / bt] * epb + L.ElementOffset(layer, 0, kvh, j % bt);
      double s = 0;
      for (int e = 0; e < d; ++e) s += static_cast<double>(qh[e]) * cuda_test::Elem16<T>::Value(k[e]);
      score[j] = s * scale;
      if (cap > 0) score[j] = cap * std::tanh(score[j] / cap);
      mx = std::max(mx, score[j]);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double sum = 0;
    for (int j = first; j < ctx; ++j) {
      const double p = std::exp(score[j] - mx);
      sum += p;
      const uint16_t* v = pool.data() + table[j / bt] * epb + L.ElementOffset(layer, 1, kvh, j % bt);
      for (int e = 0; e < d; ++e) acc[e] += p * cuda_test::Elem16<T>::Value(v[e]);
    }
    for (int e = 0; e < d; ++e) out[static_cast<size_t>(h) * d + e] = static_cast<float>(acc[e] / sum);
  }
  return out;
}

// Every decode row matches the reference; every element of a non-decode token is still the
// poison.
template <typename T>
std::vector<std::vector<float>> References(const DecodeWorld& w, const std::vector<uint16_t>& pool,
                                           const std::vector<float>& q, int layer, AttentionScores scores = {}) {
  std::vector<std::vector<float>> refs;
  for (size_t i = 0; i < w.rows.size(); ++i) {
    refs.push_back(Reference<T>(w, pool, q, layer, static_cast<int>(i), scores));
  }
  return refs;
}

template <typename T>
void ExpectMatches(const DecodeWorld& w, const std::vector<std::vector<float>>& refs,
                   const std::vector<uint16_t>& out, const std::string& what) {
  const size_t row_elems = static_cast<size_t>(w.num_heads) * w.layout.head_dim;
  for (size_t i = 0; i < w.rows.size(); ++i) {
    const std::vector<uint16_t> bits(out.begin() + w.rows[i] * row_elems,
                                     out.begin() + (w.rows[i] + 1) * row_elems);
    const double err = RelativeError(ToF32<T>(bits), refs[i]);
    EXPECT_LT(err, Tolerance<T>()) << what << ": row " << i << " ctx " << w.contexts[i];
  }
  for (int t = 0; t < w.num_tokens; ++t) {
    if (w.IsRow(t)) continue;
    int64_t written = 0;
    for (size_t e = 0; e < row_elems; ++e) written += out[t * row_elems + e] != kPoisonBits;
    EXPECT_EQ(written, 0) << what << ": non-decode token " << t << " was written";
  }
}

struct DecodeCase {
  int heads, kv_heads, head_dim, block_tokens;
  int max_splits;  // 0: DecodeMaxSplits
  AttentionScores scores = {};  // Gemma's: another scale, a soft-cap, a sliding window
};

class DecodeAttentionTest : public cuda_test::CudaParamTest<DecodeCase> {};

TEST_P(DecodeAttentionTest, MatchesReferenceOnShuffledBlocks) {
  const DecodeCase c = GetParam();
  ASSERT_TRUE(DecodeAttentionSupported(c.head_dim, c.heads, c.kv_heads));
  DecodeWorld w(c.heads, c.kv_heads, c.head_dim, c.block_tokens, /*num_layers=*/2,
                {1, 2, 15, 16, 17, 100, 1000, 5000, 40000}, /*extra=*/3, /*capacity=*/0, rng_);
  const int num_rows = static_cast<int>(w.rows.size());
  const int max_splits = c.max_splits > 0 ? c.max_splits
                                           : DecodeMaxSplits(num_rows, c.kv_heads,
                                                             cuda_test::DecodeWave(c.head_dim, false, c.block_tokens));
  const int layer = 1;
  DeviceDecode dev(w, max_splits);
  cuda_test::ForEachElem([&]<typename T>() {
    CUDA_ASSERT(FillRandom(reinterpret_cast<T*>(dev.pool.get()), dev.pool.size(), rng_(), 0.0f,
                           2.0f, nullptr));
    const std::vector<uint16_t> pool = dev.pool.Download();
    const Data16 q = Random16<T>(dev.q.size(), rng_, -2, 2);
    dev.q.Upload(q.bits);
    const std::vector<std::vector<float>> refs = References<T>(w, pool, q.values, layer, c.scores);
    DecodeAttentionParams<T> params = dev.Params<T>(w, layer, max_splits);
    params.scores = c.scores;
    // Twice: the second launch proves the split counters were left at zero.
    for (int run = 0; run < 2; ++run) {
      dev.out.Poison();
      ASSERT_EQ(DecodeAttention(params, dev.Tokens(w), dev.Kv<T>(w), nullptr, kDefaultLaunch), cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      ExpectMatches<T>(w, refs, dev.out.Download(),
                       "run " + std::to_string(run) + " max_splits " + std::to_string(max_splits));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeAttentionTest,
    ::testing::Values(DecodeCase{8, 2, 128, 16, 0},     // GQA 4 (Llama-3), heuristic splits
                      DecodeCase{8, 2, 128, 16, 1},     // one split: direct writes only
                      DecodeCase{8, 2, 128, 16, kDecodeMaxSplitsLimit},
                      DecodeCase{2, 2, 64, 16, 0},      // MHA, head_dim 64
                      DecodeCase{14, 2, 128, 16, 0},    // group 7
                      DecodeCase{8, 1, 64, 8, 5},       // group 8, 8-token blocks
                      DecodeCase{6, 2, 128, 24, 7},     // group 3, non-power-of-two blocks
                      // Gemma 2's scale and soft-cap; sliding windows (contexts 1 .. 40000
                      // cross them: window 5 within a tile, 37 across tiles and blocks, 700
                      // across splits), 8-token and non-power-of-two blocks.
                      DecodeCase{8, 4, 128, 16, 0, {1.0f / std::sqrt(224.0f), 5.0f, 0}},
                      DecodeCase{8, 2, 128, 16, 0, {0.0f, 0.0f, 37}},
                      DecodeCase{8, 2, 128, 16, 1, {0.0f, 0.0f, 5}},
                      DecodeCase{8, 1, 64, 8, 5, {0.0f, 30.0f, 37}},
                      DecodeCase{6, 2, 128, 24, 7, {0.0f, 0.0f, 700}},
                      DecodeCase{8, 2, 128, 16, kDecodeMaxSplitsLimit, {0.0f, 0.0f, 700}}),
    [](const ::testing::TestParamInfo<DecodeCase>& info) {
      const DecodeCase& c = info.param;
      std::string name = "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
                         std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens) + "s" +
                         std::to_string(c.max_splits);
      if (c.scores.scale > 0.0f) name += "_scaled";
      if (c.scores.logit_softcap > 0.0f) name += "_cap" + std::to_string(static_cast<int>(c.scores.logit_softcap));
      if (c.scores.window > 0) name += "_w" + std::to_string(c.scores.window);
      return name;
    });

TEST(DecodeAttentionShapes, SupportedShapes) {
  EXPECT_TRUE(DecodeAttentionSupported(128, 32, 8));
  EXPECT_TRUE(DecodeAttentionSupported(64, 7, 1));
  EXPECT_FALSE(DecodeAttentionSupported(96, 8, 2));
  EXPECT_FALSE(DecodeAttentionSupported(128, 36, 4));  // group 9
  EXPECT_FALSE(DecodeAttentionSupported(128, 10, 4));  // not a multiple
  // Waves of 132 SMs x 2 and x 3 resident CTAs: one row of 8 kv heads takes the whole wave
  // (33 and 49 splits), a batch that fills it alone takes one.
  EXPECT_EQ(DecodeMaxSplits(256, 8, 264), 1);
  EXPECT_EQ(DecodeMaxSplits(1, 8, 264), 33);
  EXPECT_EQ(DecodeMaxSplits(1, 8, 396), 49);
  EXPECT_EQ(DecodeMaxSplits(4, 8, 264), 8);
  EXPECT_EQ(DecodeMaxSplits(64, 8, 396), 1);
  EXPECT_LE(DecodeMaxSplits(1, 1, 396), kDecodeMaxSplitsLimit);
}

// The wave the split heuristic plans for is what the runtime says fits: every instance has
// at least one CTA per SM, and the fp8 pair-tile instance (the most registers) never more
// than the 16-position fp8 one.
TEST(DecodeAttentionShapes, ResidentCtasComeFromTheCompiledKernels) {
  KVT_SKIP_WITHOUT_CUDA();
  for (const int head_dim : {64, 128}) {
    for (const bool fp8 : {false, true}) {
      const int ctas = DecodeResidentCtasPerSm<bf16>(head_dim, fp8, 16, -1);
      EXPECT_GE(ctas, 1) << head_dim << (fp8 ? " fp8" : " bf16");
      EXPECT_LE(ctas, 8) << head_dim << (fp8 ? " fp8" : " bf16");
    }
  }
  EXPECT_LE(DecodeResidentCtasPerSm<bf16>(128, true, 16, 1), DecodeResidentCtasPerSm<bf16>(128, true, 16, 0));
}

// One launch captured once; replays after pos, block tables and q change in device memory
// (contexts grow and shrink, so rows switch between one split and many).
TEST(DecodeAttentionGraph, ReplaysWithNewPositionsAndTables) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng{std::random_device{}()};
  const int heads = 8, kv_heads = 2, head_dim = 128, bt = 16, capacity = 4096, layer = 0;
  const std::vector<std::vector<int>> steps = {
      {5, 300, 3000}, {4000, 17, 64}, {1, 1000, 2}, {2500, 2500, 4096}, {5, 300, 3000}};
  DecodeWorld w(heads, kv_heads, head_dim, bt, /*num_layers=*/1, steps[0], /*extra=*/1,
                capacity, rng);
  const int max_splits =
      DecodeMaxSplits(static_cast<int32_t>(w.rows.size()), kv_heads, cuda_test::DecodeWave(head_dim, false, bt));
  DeviceDecode dev(w, max_splits);
  CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(dev.pool.get()), dev.pool.size(), rng(),
                         0.0f, 2.0f, nullptr));
  const std::vector<uint16_t> pool = dev.pool.Download();

  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_EQ(DecodeAttention(dev.Params<bf16>(w, layer, max_splits), dev.Tokens(w),
                            dev.Kv<bf16>(w), stream, kDefaultLaunch),
            cudaSuccess);
  CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));

  for (size_t step = 0; step < steps.size(); ++step) {
    w.Reassign(steps[step], rng);
    dev.UploadStep(w);
    const Data16 q = Random16<bf16>(dev.q.size(), rng, -2, 2);
    dev.q.Upload(q.bits);
    dev.out.Poison();
    CUDA_ASSERT(cudaDeviceSynchronize());
    CUDA_ASSERT(cudaGraphLaunch(exec, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    ExpectMatches<bf16>(w, References<bf16>(w, pool, q.values, layer), dev.out.Download(),
                        "replay " + std::to_string(step));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvtier::cuda
