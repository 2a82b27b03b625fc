// Tensor-core prefill attention: the host tile planning, the kernel against a host
// reference (fp32 scores, fp64 softmax) on shuffled block tables and ragged chunks, and a
// timing of one Llama-3-8B layer against the CUDA-core PagedAttention. GPU tests skip
// without a device.
#include "backend/cuda/prefill_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_attention_wgmma.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda_model_support.h"
#include "backend/kv_layout.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "prefill_world.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::PrefillWorld;
using cuda_test::ReferenceAttention;
using cuda_test::DeviceArray;
using cuda_test::Random16;
using cuda_test::RelativeError;
using cuda_test::ToF32;
using cuda_test::Tolerance;

TEST(PrefillPlanTest, TileTokensFillTheRows) {
  EXPECT_EQ(PrefillTileTokens(128, 1), 64);
  EXPECT_EQ(PrefillTileTokens(128, 4), 16);
  EXPECT_EQ(PrefillTileTokens(64, 7), 9);  // 63 rows used
  EXPECT_EQ(PrefillTileTokens(128, 8), 8);
  EXPECT_EQ(PrefillTileTokens(128, 64), 1);
  EXPECT_EQ(PrefillTileTokens(128, 65), 0);
  EXPECT_EQ(PrefillTileTokens(128, 4, PrefillKernel::kWgmma), 32);
  EXPECT_EQ(PrefillTileTokens(128, 128, PrefillKernel::kWgmma), 1);
  EXPECT_EQ(PrefillTileTokens(128, 129, PrefillKernel::kWgmma), 0);
  EXPECT_TRUE(PrefillWgmmaSupported(true, 128, 32, 8));
  EXPECT_FALSE(PrefillWgmmaSupported(false, 128, 32, 8));
  EXPECT_FALSE(PrefillWgmmaSupported(true, 64, 32, 8));
  EXPECT_FALSE(PrefillWgmmaSupported(true, 128, 30, 8));
  EXPECT_TRUE(PrefillAttentionSupported(128, 32, 8));
  EXPECT_TRUE(PrefillAttentionSupported(64, 28, 4));
  EXPECT_FALSE(PrefillAttentionSupported(80, 32, 8));
  EXPECT_FALSE(PrefillAttentionSupported(256, 32, 8));
  EXPECT_FALSE(PrefillAttentionSupported(128, 30, 8));
}

TEST(PrefillPlanTest, TilesCoverEveryTokenLongestFirst) {
  const std::vector<PrefillChunk> chunks = {
      {0, 0, 1, 40}, {1, 1, 37, 0}, {2, 38, 16, 1000}, {3, 54, 17, 5}};
  std::vector<PrefillTile> tiles = {PrefillTile{9, 9, 9, 9}};  // appended after this
  PlanPrefillTiles(chunks, 16, &tiles);
  ASSERT_EQ(tiles.front().chunk, 9);
  std::vector<int> seen(71, 0);
  for (size_t i = 1; i < tiles.size(); ++i) {
    const PrefillTile& t = tiles[i];
    ASSERT_GE(t.num_tokens, 1);
    ASSERT_LE(t.num_tokens, 16);
    const PrefillChunk& c = chunks[t.chunk];
    EXPECT_EQ(t.first_pos, c.start_position + (t.token_begin - c.token_begin));
    for (int k = 0; k < t.num_tokens; ++k) ++seen[t.token_begin + k];
    if (i > 1) {
      EXPECT_GE(tiles[i - 1].first_pos + tiles[i - 1].num_tokens, t.first_pos + t.num_tokens);
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);
  EXPECT_EQ(tiles.size(), 1u + 1 + 3 + 1 + 2);
}

// One way to run PrefillAttention: the kernel, and for kWgmma the variant (its KV tile and
// pipeline depth; PrefillAttentionWgmma).
struct PrefillRun {
  PrefillKernel kernel;
  int variant;
  const char* name;
};
constexpr PrefillRun kMmaRun{PrefillKernel::kMma, 0, "mma"};
constexpr PrefillRun kWgmmaRuns[] = {{PrefillKernel::kWgmma, 0, "wgmma kv128 x2"},
                                     {PrefillKernel::kWgmma, 1, "wgmma kv64 x2"},
                                     {PrefillKernel::kWgmma, 2, "wgmma kv64 x3"},
                                     {PrefillKernel::kWgmma, 3, "wgmma kv128 x3"},
                                     {PrefillKernel::kWgmma, 4, "overlap kv128 x3"},
                                     {PrefillKernel::kWgmma, 5, "overlap kv64 x3"},
                                     {PrefillKernel::kWgmma, 6, "overlap kv64 x4"},
                                     {PrefillKernel::kWgmma, 7, "kv64 x2, 2/SM"}};

// The runs that apply to T and the shape on this device: mma always, the wgmma variants for
// bf16 with head_dim 128 on compute capability 9.0.
template <typename T>
std::vector<PrefillRun> RunsFor(int head_dim, int heads, int kv_heads) {
  std::vector<PrefillRun> runs = {kMmaRun};
  if (std::is_same_v<T, bf16> && PrefillWgmmaSupported(true, head_dim, heads, kv_heads) && SkinnyGemmDeviceOk(0)) {
    runs.insert(runs.end(), std::begin(kWgmmaRuns), std::end(kWgmmaRuns));
  }
  return runs;
}

template <typename T>
cudaError_t RunPrefill(const PrefillRun& run, PrefillAttentionParams<T> params, const PagedKv<T>& kv) {
  params.kernel = run.kernel;
  if constexpr (std::is_same_v<T, bf16>) {
    if (run.kernel == PrefillKernel::kWgmma && run.variant != 0) {
      int bt_shift = 0;
      while ((1 << bt_shift) < kv.block_tokens) ++bt_shift;
      return PrefillAttentionWgmma(params, kv, bt_shift, nullptr, run.variant);
    }
  }
  return PrefillAttention(params, kv, nullptr);
}

// The world's index arrays and tiles (planned for `kernel`) on the device.
struct DeviceWorld {
  DeviceArray<int32_t> indptr, indices;
  DeviceArray<PrefillTile> tiles;
  int32_t num_tiles = 0;
  explicit DeviceWorld(const PrefillWorld& w, PrefillKernel kernel = PrefillKernel::kMma)
      : indptr(w.indptr.size()), indices(w.indices.size()), tiles(w.num_tokens) {
    indptr.Upload(w.indptr);
    indices.Upload(w.indices);
    const int group = w.num_heads / static_cast<int>(w.layout.num_kv_heads);
    std::vector<PrefillTile> plan;
    PlanPrefillTiles(w.prefill_chunks, PrefillTileTokens(static_cast<int>(w.layout.head_dim), group, kernel),
                     &plan);
    num_tiles = static_cast<int32_t>(plan.size());
    tiles.Upload(plan);
  }
  template <typename T>
  PagedKv<T> Kv(const PrefillWorld& w, void* pool) const {
    return cuda_test::PagedKvOf(w.layout, static_cast<T*>(pool), indices.get(), indptr.get());
  }
};

using PrefillCase = cuda_test::AttentionShape;

class PrefillAttentionTest : public cuda_test::CudaParamTest<PrefillCase> {};

TEST_P(PrefillAttentionTest, MatchesReferenceOnShuffledBlocks) {
  const PrefillCase p = GetParam();
  // (tokens, start): a lone token, short chunks off the block grid, a chunk of exactly one
  // tile, one just past a tile, prefix hits / later chunks deep into the context.
  PrefillWorld w(p.heads, p.kv_heads, p.head_dim, p.block_tokens,
                 {{1, 0}, {3, 5}, {16, 0}, {17, 100}, {100, 1000}, {600, 1037}, {1, 2000},
                  {64, 64}},
                 rng_);
  cuda_test::ForEachElem([&]<typename T>() {
    const int layer = 1;
    Data16 pool = Random16<T>(w.PoolElements(), rng_, -2, 2);
    Data16 q = Random16<T>(w.QElements(), rng_, -2, 2);
    DeviceArray<uint16_t> d_pool(pool.bits.size()), d_q(q.bits.size()), d_out(q.bits.size());
    d_pool.Upload(pool.bits);
    d_q.Upload(q.bits);
    const std::vector<float> ref = ReferenceAttention(w, pool.values, q.values, layer);
    ASSERT_TRUE(PrefillAttentionSupported(p.head_dim, p.heads, p.kv_heads));
    for (const PrefillRun& run : RunsFor<T>(p.head_dim, p.heads, p.kv_heads)) {
      SCOPED_TRACE(run.name);
      DeviceWorld dw(w, run.kernel);
      PrefillAttentionParams<T> params;
      params.q = reinterpret_cast<const T*>(d_q.get());
      params.out = reinterpret_cast<T*>(d_out.get());
      params.tiles = dw.tiles.get();
      params.num_tiles = dw.num_tiles;
      params.num_heads = p.heads;
      params.layer = layer;
      d_out.Poison();
      ASSERT_EQ(RunPrefill(run, params, dw.Kv<T>(w, d_pool.get())), cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      const std::vector<float> out = ToF32<T>(d_out.Download());

      const size_t row = static_cast<size_t>(p.heads) * p.head_dim;
      for (const PrefillChunk& c : w.prefill_chunks) {  // every element written (no NaN) and close
        const std::vector<float> got(out.begin() + c.token_begin * row,
                                     out.begin() + (c.token_begin + c.num_tokens) * row);
        const std::vector<float> want(ref.begin() + c.token_begin * row,
                                      ref.begin() + (c.token_begin + c.num_tokens) * row);
        double max_abs = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          max_abs = std::max(max_abs, static_cast<double>(std::fabs(got[i] - want[i])));
        }
        EXPECT_LT(RelativeError(got, want), Tolerance<T>())
            << "chunk " << c.chunk << " start " << c.start_position << " tokens " << c.num_tokens;
        EXPECT_LT(max_abs, 3e-2) << "chunk " << c.chunk;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PrefillAttentionTest,
    ::testing::Values(PrefillCase{8, 2, 128, 16},    // Llama-3 GQA 4
                      PrefillCase{4, 4, 64, 16},     // MHA, head_dim 64
                      PrefillCase{14, 2, 128, 16},   // group 7: 9 tokens, 63 of 64 rows
                      PrefillCase{8, 2, 128, 32},    // other block size
                      PrefillCase{6, 2, 64, 8},      // group 3, blocks of 8
                      PrefillCase{32, 1, 64, 16},    // MQA: 2 tokens per tile
                      PrefillCase{8, 8, 128, 8},     // MHA, head_dim 128: 128 tokens per wgmma tile
                      PrefillCase{64, 2, 128, 16}),  // group 32: 4 tokens per wgmma tile
    [](const ::testing::TestParamInfo<PrefillCase>& info) {
      const PrefillCase& c = info.param;
      return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
             std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens);
    });

// Gemma's scores on the mma.sync kernel (the one KernelSelection runs them on where the wgmma
// kernel does not apply): another scale with a soft-cap, and sliding windows shorter
// than a KV tile (5: rows of a tile whose first KV tiles are all masked), across tiles (100)
// and longer than most contexts (1500), against the reference.
TEST(PrefillAttentionScoresTest, MmaAppliesScaleSoftCapAndWindow) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(5);
  const cuda_test::AttentionShape p{8, 2, 128, 16};
  PrefillWorld w(p.heads, p.kv_heads, p.head_dim, p.block_tokens,
                 {{1, 0}, {3, 5}, {17, 100}, {100, 1000}, {600, 1037}, {64, 64}}, rng);
  const AttentionScores cases[] = {{1.0f / std::sqrt(224.0f), 5.0f, 0}, {0.0f, 0.0f, 5}, {0.0f, 20.0f, 100},
                                   {0.3f, 0.0f, 1500}};
  cuda_test::ForEachElem([&]<typename T>() {
    const int layer = 1;
    Data16 pool = Random16<T>(w.PoolElements(), rng, -2, 2);
    Data16 q = Random16<T>(w.QElements(), rng, -2, 2);
    DeviceArray<uint16_t> d_pool(pool.bits.size()), d_q(q.bits.size()), d_out(q.bits.size());
    d_pool.Upload(pool.bits);
    d_q.Upload(q.bits);
    DeviceWorld dw(w, PrefillKernel::kMma);
    for (const AttentionScores& scores : cases) {
      SCOPED_TRACE(::testing::Message() << "scale " << scores.scale << " cap " << scores.logit_softcap << " window "
                                        << scores.window);
      const std::vector<float> ref = ReferenceAttention(w, pool.values, q.values, layer, scores);
      PrefillAttentionParams<T> params;
      params.q = reinterpret_cast<const T*>(d_q.get());
      params.out = reinterpret_cast<T*>(d_out.get());
      params.tiles = dw.tiles.get();
      params.num_tiles = dw.num_tiles;
      params.num_heads = p.heads;
      params.layer = layer;
      params.scores = scores;
      d_out.Poison();
      ASSERT_EQ(PrefillAttention(params, dw.Kv<T>(w, d_pool.get()), nullptr), cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      const std::vector<float> out = ToF32<T>(d_out.Download());
      const size_t row = static_cast<size_t>(p.heads) * p.head_dim;
      for (const PrefillChunk& c : w.prefill_chunks) {
        const std::vector<float> got(out.begin() + c.token_begin * row,
                                     out.begin() + (c.token_begin + c.num_tokens) * row);
        const std::vector<float> want(ref.begin() + c.token_begin * row,
                                      ref.begin() + (c.token_begin + c.num_tokens) * row);
        EXPECT_LT(RelativeError(got, want), Tolerance<T>())
            << "chunk " << c.chunk << " start " << c.start_position << " tokens " << c.num_tokens;
      }
    }
  });
}

constexpr uint16_t kBf16NaN = 0x7fc0;

// The pool's 16-bit rows that no prefill kernel may read under `window`, set to NaN (a V row
// read at weight 0 would still make NaN): every row past each chunk's context, and with a
// window every row before the 128-position boundary at or below the chunk's first query's
// window (the kernels' KV tiles of 64 or 128 positions start at multiples of 64, so none
// visits a tile before that one).
std::vector<uint16_t> PoisonUnreadRows(const PrefillWorld& w, std::vector<uint16_t> bits, int window) {
  const int64_t bt = w.layout.block_tokens, d = w.layout.head_dim;
  for (const PrefillChunk& c : w.prefill_chunks) {
    const std::vector<int32_t>& table = w.tables[c.chunk];
    const int64_t first_read = window > 0 ? std::max<int64_t>(0, c.start_position - window + 1) / 128 * 128 : 0;
    const int64_t end = c.start_position + c.num_tokens;
    for (int64_t pos = 0; pos < static_cast<int64_t>(table.size()) * bt; ++pos) {
      if (pos >= first_read && pos < end) continue;
      for (int64_t layer = 0; layer < w.layout.num_layers; ++layer) {
        for (int64_t kv = 0; kv < 2; ++kv) {
          for (int64_t head = 0; head < w.layout.num_kv_heads; ++head) {
            const int64_t at = table[pos / bt] * w.layout.ElementsPerBlock() +
                               w.layout.ElementOffset(layer, kv, head, pos % bt);
            std::fill(bits.begin() + at, bits.begin() + at + d, kBf16NaN);
          }
        }
      }
    }
  }
  return bits;
}

// Gemma's scores on the wgmma kernel's scored instances, every variant and the mma.sync kernel on the same bytes, against the
// reference: Gemma 2's scale (query_pre_attn_scalar 256) with soft-caps 50 and 5, windows
// within a tile (5), across tiles (37), across many (700) and Gemma 2's (4096), over a ragged
// batch of chunks from 1 to 1000 tokens (off the 128-token tile and the 16-position block),
// from position 0 and past a cached prefix up to 5000 deep. Rows past each context and before
// each chunk's first KV tile are NaN: the skipped tiles are never read.
class PrefillWgmmaScoresTest : public cuda_test::CudaParamTest<PrefillCase> {};

TEST_P(PrefillWgmmaScoresTest, AppliesScaleSoftCapAndWindowOnEveryVariant) {
  const PrefillCase p = GetParam();
  if (!SkinnyGemmDeviceOk(0)) GTEST_SKIP() << "the wgmma kernel needs compute capability 9.0";
  PrefillWorld w(p.heads, p.kv_heads, p.head_dim, p.block_tokens,
                 {{1, 0}, {3, 5}, {17, 100}, {129, 0}, {100, 1000}, {600, 1037}, {64, 64}, {300, 4090},
                  {1000, 3500}, {1, 4999}},
                 rng_);
  const float gemma2_scale = 1.0f / 16.0f;
  const AttentionScores cases[] = {{gemma2_scale, 0.0f, 0},   {gemma2_scale, 50.0f, 0}, {gemma2_scale, 5.0f, 0},
                                   {gemma2_scale, 50.0f, 5},  {gemma2_scale, 5.0f, 37}, {0.0f, 0.0f, 700},
                                   {gemma2_scale, 50.0f, 700}, {gemma2_scale, 50.0f, 4096}};
  const int layer = 1;
  Data16 pool = Random16<bf16>(w.PoolElements(), rng_, -2, 2);
  Data16 q = Random16<bf16>(w.QElements(), rng_, -2, 2);
  DeviceArray<uint16_t> d_pool(pool.bits.size()), d_q(q.bits.size()), d_out(q.bits.size());
  d_q.Upload(q.bits);
  const std::vector<PrefillRun> runs = RunsFor<bf16>(p.head_dim, p.heads, p.kv_heads);
  ASSERT_GT(runs.size(), 1u);
  for (const AttentionScores& scores : cases) {
    SCOPED_TRACE(::testing::Message() << "scale " << scores.scale << " cap " << scores.logit_softcap << " window "
                                      << scores.window);
    d_pool.Upload(PoisonUnreadRows(w, pool.bits, scores.window));
    const std::vector<float> ref = ReferenceAttention(w, pool.values, q.values, layer, scores);
    for (const PrefillRun& run : runs) {
      SCOPED_TRACE(run.name);
      DeviceWorld dw(w, run.kernel);
      PrefillAttentionParams<bf16> params;
      params.q = reinterpret_cast<const bf16*>(d_q.get());
      params.out = reinterpret_cast<bf16*>(d_out.get());
      params.tiles = dw.tiles.get();
      params.num_tiles = dw.num_tiles;
      params.num_heads = p.heads;
      params.layer = layer;
      params.scores = scores;
      d_out.Poison();
      ASSERT_EQ(RunPrefill(run, params, dw.Kv<bf16>(w, d_pool.get())), cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      const std::vector<float> out = ToF32<bf16>(d_out.Download());
      const size_t row = static_cast<size_t>(p.heads) * p.head_dim;
      for (const PrefillChunk& c : w.prefill_chunks) {  // every element written (no NaN) and close
        const std::vector<float> got(out.begin() + c.token_begin * row,
                                     out.begin() + (c.token_begin + c.num_tokens) * row);
        const std::vector<float> want(ref.begin() + c.token_begin * row,
                                      ref.begin() + (c.token_begin + c.num_tokens) * row);
        EXPECT_LT(RelativeError(got, want), Tolerance<bf16>())
            << "chunk " << c.chunk << " start " << c.start_position << " tokens " << c.num_tokens;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillWgmmaScoresTest,
                         ::testing::Values(PrefillCase{8, 2, 128, 16},   // GQA 4: 32 tokens per wgmma tile
                                           PrefillCase{16, 8, 128, 16},  // Gemma 2's group 2
                                           PrefillCase{4, 4, 128, 32}),  // MHA: 128 tokens per tile
                         [](const ::testing::TestParamInfo<PrefillCase>& info) {
                           const PrefillCase& c = info.param;
                           return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "bt" +
                                  std::to_string(c.block_tokens);
                         });

TEST(PrefillAttentionArgsTest, RejectsUnsupportedShapes) {
  PrefillAttentionParams<bf16> params;
  params.num_tiles = 1;
  params.num_heads = 8;
  PagedKv<bf16> kv;
  kv.num_kv_heads = 2;
  kv.head_dim = 96;
  kv.block_tokens = 16;
  EXPECT_EQ(PrefillAttention(params, kv, nullptr), cudaErrorInvalidValue);
  kv.head_dim = 128;
  kv.block_tokens = 24;
  EXPECT_EQ(PrefillAttention(params, kv, nullptr), cudaErrorInvalidValue);
}

// Median of `runs` timed launches (after warm-up), in microseconds.
template <typename Launch>
double MedianMicros(Launch&& launch, int warmup, int runs) {
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  for (int i = 0; i < warmup; ++i) launch();
  cudaDeviceSynchronize();
  std::vector<float> ms;
  for (int i = 0; i < runs; ++i) {
    cudaEventRecord(begin);
    launch();
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float t = 0;
    cudaEventElapsedTime(&t, begin, end);
    ms.push_back(t);
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0;
}

struct TimingCase {
  int tokens;
  int64_t start;
};

class PrefillAttentionTiming : public ::testing::TestWithParam<TimingCase> {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
  std::mt19937 rng_{12345};
};

// One layer of Llama-3-8B attention (32 heads, 8 kv heads, head_dim 128, blocks of 16), bf16
// and fp8 KV: every kernel and wgmma variant on the same inputs, a table of times and
// TFLOP/s, and each run's output against the mma kernel's.
TEST_P(PrefillAttentionTiming, Llama3Layer) {
  const TimingCase tc = GetParam();
  const int heads = 32, kv_heads = 8, d = 128;
  PrefillWorld w(heads, kv_heads, d, 16, {{tc.tokens, tc.start}}, rng_);
  DeviceArray<uint16_t> d_pool(w.PoolElements()), d_q(w.QElements()), d_out(w.QElements()), d_ref(w.QElements());
  // V around 0.5 so that outputs are far from 0 and relative errors mean something.
  CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(d_pool.get()), w.PoolElements(), 1, 0.5f, 1.0f, nullptr));
  CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(d_q.get()), w.QElements(), 2, 0.0f, 2.0f, nullptr));
  // An fp8 pool over the same blocks: codes of 1.0 (0x38) and finite scales (the same byte).
  KvLayout fp8_layout = w.layout;
  fp8_layout.dtype = DType::kF8E4M3;
  const int64_t fp8_blocks = w.PoolElements() / w.layout.ElementsPerBlock();
  DeviceArray<uint8_t> d_fp8(static_cast<size_t>(fp8_blocks * fp8_layout.BlockBytes()));
  CUDA_ASSERT(cudaMemset(d_fp8.get(), 0x38, static_cast<size_t>(fp8_blocks * fp8_layout.BlockBytes())));
  // Causal FLOPs: 4 * d * heads * sum over query tokens of their context length.
  const double pairs = static_cast<double>(tc.tokens) * tc.start + 0.5 * tc.tokens * (tc.tokens + 1.0);
  const double flops = 4.0 * d * heads * pairs;
  for (const bool fp8 : {false, true}) {
    double mma_us = 0;
    for (const PrefillRun& run : RunsFor<bf16>(d, heads, kv_heads)) {
      DeviceWorld dw(w, run.kernel);
      const PagedKv<bf16> kv = fp8 ? cuda_test::PagedKvOf(fp8_layout, reinterpret_cast<bf16*>(d_fp8.get()),
                                                          dw.indices.get(), dw.indptr.get())
                                   : dw.Kv<bf16>(w, d_pool.get());
      PrefillAttentionParams<bf16> params;
      params.q = reinterpret_cast<const bf16*>(d_q.get());
      params.out = reinterpret_cast<bf16*>(run.kernel == PrefillKernel::kMma ? d_ref.get() : d_out.get());
      params.tiles = dw.tiles.get();
      params.num_tiles = dw.num_tiles;
      params.num_heads = heads;
      params.layer = 1;
      CUDA_ASSERT(RunPrefill(run, params, kv));
      CUDA_ASSERT(cudaDeviceSynchronize());
      const double us = MedianMicros([&] { RunPrefill(run, params, kv); }, 3, 20);
      CUDA_ASSERT(cudaGetLastError());
      double rel = 0;
      if (run.kernel == PrefillKernel::kMma) {
        mma_us = us;
      } else {
        rel = RelativeError(ToF32<bf16>(d_out.Download()), ToF32<bf16>(d_ref.Download()));
        EXPECT_LT(rel, Tolerance<bf16>()) << run.name << (fp8 ? " fp8 KV" : " bf16 KV");
      }
      std::printf("[prefill-attention] %5d tokens at %6lld, %s KV, %-15s %9.1f us %6.1f TFLOP/s %5.2fx of mma, "
                  "rel err vs mma %.1e\n",
                  tc.tokens, static_cast<long long>(tc.start), fp8 ? "fp8 " : "bf16", run.name, us,
                  flops / us * 1e-6, mma_us / us, rel);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Llama3, PrefillAttentionTiming,
                         ::testing::Values(TimingCase{512, 0}, TimingCase{2048, 0}, TimingCase{2048, 30720},
                                           TimingCase{8192, 0}),
                         [](const ::testing::TestParamInfo<TimingCase>& info) {
                           return "t" + std::to_string(info.param.tokens) + "at" + std::to_string(info.param.start);
                         });

struct WindowTimingCase {
  int tokens;
  int window;  // 0: none (Gemma 2's global layers: the soft-cap alone)
};

class PrefillWindowTiming : public ::testing::TestWithParam<WindowTimingCase> {
 protected:
  void SetUp() override {
    KVT_SKIP_WITHOUT_CUDA();
    if (!SkinnyGemmDeviceOk(0)) GTEST_SKIP() << "the wgmma kernel needs compute capability 9.0";
  }
  std::mt19937 rng_{2024};
};

// One Gemma-2-scored layer (scale 1/16, soft-cap 50) at Llama-3-8B's attention shape (32 heads,
// 8 kv heads, head_dim 128, blocks of 16), one long prompt, bf16 and fp8 KV: the mma.sync
// kernel (what such a model prefills on with cuda_prefill_wgmma off) against the default
// wgmma variant with the same scores, each window's skipped tiles included,
// and the wgmma output against the mma one.
TEST_P(PrefillWindowTiming, GemmaScoredLayer) {
  const WindowTimingCase tc = GetParam();
  const int heads = 32, kv_heads = 8, d = 128;
  PrefillWorld w(heads, kv_heads, d, 16, {{tc.tokens, 0}}, rng_);
  DeviceArray<uint16_t> d_pool(w.PoolElements()), d_q(w.QElements()), d_out(w.QElements()), d_ref(w.QElements());
  CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(d_pool.get()), w.PoolElements(), 1, 0.5f, 1.0f, nullptr));
  CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(d_q.get()), w.QElements(), 2, 0.0f, 2.0f, nullptr));
  KvLayout fp8_layout = w.layout;
  fp8_layout.dtype = DType::kF8E4M3;
  const int64_t fp8_blocks = w.PoolElements() / w.layout.ElementsPerBlock();
  DeviceArray<uint8_t> d_fp8(static_cast<size_t>(fp8_blocks * fp8_layout.BlockBytes()));
  CUDA_ASSERT(cudaMemset(d_fp8.get(), 0x38, static_cast<size_t>(fp8_blocks * fp8_layout.BlockBytes())));
  const AttentionScores scores{1.0f / 16.0f, 50.0f, tc.window};
  // FLOPs of the positions read: each query reads min(pos + 1, window) keys.
  double pairs = 0;
  for (int64_t pos = 0; pos < tc.tokens; ++pos) pairs += tc.window > 0 ? std::min<int64_t>(pos + 1, tc.window) : pos + 1;
  const double flops = 4.0 * d * heads * pairs;
  for (const bool fp8 : {false, true}) {
    double mma_us = 0;
    for (const PrefillRun& run : {kMmaRun, kWgmmaRuns[0]}) {
      DeviceWorld dw(w, run.kernel);
      const PagedKv<bf16> kv = fp8 ? cuda_test::PagedKvOf(fp8_layout, reinterpret_cast<bf16*>(d_fp8.get()),
                                                          dw.indices.get(), dw.indptr.get())
                                   : dw.Kv<bf16>(w, d_pool.get());
      PrefillAttentionParams<bf16> params;
      params.q = reinterpret_cast<const bf16*>(d_q.get());
      params.out = reinterpret_cast<bf16*>(run.kernel == PrefillKernel::kMma ? d_ref.get() : d_out.get());
      params.tiles = dw.tiles.get();
      params.num_tiles = dw.num_tiles;
      params.num_heads = heads;
      params.layer = 1;
      params.scores = scores;
      CUDA_ASSERT(RunPrefill(run, params, kv));
      CUDA_ASSERT(cudaDeviceSynchronize());
      const double us = MedianMicros([&] { RunPrefill(run, params, kv); }, 3, 10);
      CUDA_ASSERT(cudaGetLastError());
      double rel = 0;
      if (run.kernel == PrefillKernel::kMma) {
        mma_us = us;
      } else {
        rel = RelativeError(ToF32<bf16>(d_out.Download()), ToF32<bf16>(d_ref.Download()));
        EXPECT_LT(rel, Tolerance<bf16>()) << (fp8 ? "fp8 KV" : "bf16 KV");
      }
      std::printf("[prefill-window] %5d tokens, window %5d, cap 50, %s KV, %-15s %9.1f us %6.1f TFLOP/s %5.2fx of "
                  "mma, rel err vs mma %.1e\n",
                  tc.tokens, tc.window, fp8 ? "fp8 " : "bf16", run.name, us, flops / us * 1e-6, mma_us / us, rel);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gemma, PrefillWindowTiming,
                         ::testing::Values(WindowTimingCase{8192, 0}, WindowTimingCase{8192, 1024},
                                           WindowTimingCase{8192, 4096}, WindowTimingCase{32768, 1024},
                                           WindowTimingCase{32768, 4096}),
                         [](const ::testing::TestParamInfo<WindowTimingCase>& info) {
                           return "t" + std::to_string(info.param.tokens) + "w" + std::to_string(info.param.window);
                         });

}  // namespace
}  // namespace kvtier::cuda
