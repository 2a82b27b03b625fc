// fp8 (E4M3) KV on the GPU against the CPU backend on identical data: the KV write (QkvPost)
// produces the CPU quantizer's bytes (codes and scales), and DecodeAttention /
// PrefillAttention over an fp8 pool match the CPU PagedAttention reading the same bytes.
// GPU tests skip without a device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda_model_support.h"
#include "backend/kv_layout.h"
#include "common/fp8_e4m3.h"
#include "cuda_test_util.h"
#include "decode_world.h"
#include "gtest/gtest.h"
#include "paged_world.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::DeviceArray;
using cuda_test::Random16;
using cuda_test::RelativeError;
using cuda_test::ToF32;
using cuda_test::Tolerance;

KvLayout Fp8Layout(int layers, int kv_heads, int head_dim, int block_tokens) {
  KvLayout layout;
  layout.num_layers = layers;
  layout.num_kv_heads = kv_heads;
  layout.head_dim = head_dim;
  layout.block_tokens = block_tokens;
  layout.dtype = DType::kF8E4M3;
  return layout;
}

template <typename T>
PagedKv<T> Fp8Kv(const KvLayout& layout, void* pool, const int32_t* indices, const int32_t* indptr) {
  return cuda_test::PagedKvOf(layout, static_cast<T*>(pool), indices, indptr);  // layout.dtype is fp8
}

// A random fp8 pool: finite codes (never the NaN pattern), scales over four decades, and
// some all-zero rows with scale 1 (what the quantizer writes for them).
std::vector<uint8_t> RandomFp8Pool(const KvLayout& layout, int64_t blocks, std::mt19937& rng) {
  std::vector<uint8_t> pool(static_cast<size_t>(blocks) * layout.BlockBytes());
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> log_scale(-4.0f, 0.0f);
  std::uniform_int_distribution<int> zero_row(0, 40);
  const int64_t rows = layout.ScalesPerBlock();
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* block = pool.data() + b * layout.BlockBytes();
    for (int64_t r = 0; r < rows; ++r) {
      const bool zero = zero_row(rng) == 0;
      for (int64_t d = 0; d < layout.head_dim; ++d) {
        uint8_t c = static_cast<uint8_t>(code(rng));
        if ((c & 0x7f) == 0x7f) c ^= 1;
        block[r * layout.head_dim + d] = zero ? 0 : c;
      }
      const float scale = zero ? 1.0f : std::pow(10.0f, log_scale(rng)) / kFp8E4M3Max;
      std::memcpy(block + layout.ElementsPerBlock() + r * sizeof(float), &scale, sizeof(float));
    }
  }
  return pool;
}

class KvFp8Test : public ::testing::Test {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
  std::mt19937 rng_{std::random_device{}()};
};

// QkvPost with no bias, no norms and zero RoPE frequencies stores the qkv row's K and V
// values unrotated, so the bytes must be exactly what the CPU WriteKv stores for them.
TEST_F(KvFp8Test, KvWriteMatchesTheCpuQuantizerBitForBit) {
  for (const int head_dim : {64, 128}) {
    SCOPED_TRACE(head_dim);
    cuda_test::ForEachElem([&]<typename T>() {
      const int heads = 8, kv_heads = 2, bt = 16, layer = 1, start = 13, rows = 37;
      const KvLayout layout = Fp8Layout(2, kv_heads, head_dim, bt);
      const int width = (heads + 2 * kv_heads) * head_dim;
      const int64_t blocks = (start + rows + bt - 1) / bt + 2;
      std::vector<int32_t> table((start + rows + bt - 1) / bt);
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(blocks - 1 - i);  // reversed
      // Wide range: rows with tiny and large values, one all-zero V row.
      Data16 qkv = Random16<T>(static_cast<size_t>(rows) * width, rng_, -3, 3);
      const uint16_t zero_bits = cuda_test::Elem16<T>::Bits(0.0f);
      for (int d = 0; d < head_dim; ++d) {
        const size_t i = static_cast<size_t>(5) * width + (heads + kv_heads) * head_dim + d;
        qkv.bits[i] = zero_bits;
        qkv.values[i] = 0.0f;
      }
      for (int d = 0; d < head_dim; ++d) {  // a row of small values (subnormal codes)
        const size_t i = static_cast<size_t>(7) * width + heads * head_dim + d;
        qkv.bits[i] = cuda_test::Elem16<T>::Bits(qkv.values[i] * 1e-3f);
        qkv.values[i] = cuda_test::Elem16<T>::Value(qkv.bits[i]);
      }
      std::vector<int32_t> chunk(rows, 0), pos(rows), indptr = {0, static_cast<int32_t>(table.size())};
      for (int t = 0; t < rows; ++t) pos[t] = start + t;

      DeviceArray<uint16_t> d_qkv(qkv.bits.size()), d_q(static_cast<size_t>(rows) * heads * head_dim);
      DeviceArray<uint8_t> d_pool(blocks * layout.BlockBytes());
      DeviceArray<int32_t> d_chunk(rows), d_pos(rows), d_indptr(2), d_indices(table.size());
      DeviceArray<float> d_inv_freq(head_dim / 2);
      d_qkv.Upload(qkv.bits);
      d_chunk.Upload(chunk);
      d_pos.Upload(pos);
      d_indptr.Upload(indptr);
      d_indices.Upload(table);
      d_inv_freq.Upload(std::vector<float>(head_dim / 2, 0.0f));
      CUDA_ASSERT(cudaMemset(d_pool.get(), 0, blocks * layout.BlockBytes()));

      QkvPostParams<T> params;
      params.qkv = reinterpret_cast<const T*>(d_qkv.get());
      params.inv_freq = d_inv_freq.get();
      params.num_heads = heads;
      params.layer = layer;
      params.q_out = reinterpret_cast<T*>(d_q.get());
      const PagedKv<T> kv = Fp8Kv<T>(layout, d_pool.get(), d_indices.get(), d_indptr.get());
      ASSERT_EQ(QkvPost(params, StepTokens{d_chunk.get(), d_pos.get(), rows}, kv, nullptr, cuda_test::kDefaultLaunch),
                cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      const std::vector<uint8_t> got = d_pool.Download();

      std::vector<float> k(static_cast<size_t>(rows) * kv_heads * head_dim), v(k.size());
      for (int t = 0; t < rows; ++t) {
        for (int e = 0; e < kv_heads * head_dim; ++e) {
          k[t * kv_heads * head_dim + e] = qkv.values[static_cast<size_t>(t) * width + heads * head_dim + e];
          v[t * kv_heads * head_dim + e] =
              qkv.values[static_cast<size_t>(t) * width + (heads + kv_heads) * head_dim + e];
        }
      }
      std::vector<uint8_t> want(got.size(), 0);
      ::kvtier::WriteKv(layout, want.data(), table, layer, start, rows, k.data(), v.data());
      size_t mismatches = 0, first = got.size();
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] != want[i]) {
          ++mismatches;
          first = std::min(first, i);
        }
      }
      EXPECT_EQ(mismatches, 0u) << "first differing byte " << first << " of " << got.size();
    });
  }
}

// Reference outputs of every chunk of a PagedWorld through the CPU PagedAttention over the
// same fp8 bytes (q as the 16-bit values the kernel reads), scores as `scores` says.
std::vector<float> CpuReference(const cuda_test::PagedWorld& w, const KvLayout& layout,
                                const std::vector<uint8_t>& pool, const std::vector<float>& q, int layer,
                                const AttentionScores& scores = {}) {
  const AttentionOptions options = cuda_test::CpuAttentionOptions(scores);
  const size_t row = static_cast<size_t>(w.num_heads) * layout.head_dim;
  std::vector<float> out(w.QElements());
  size_t token = 0;
  for (size_t c = 0; c < w.chunks.size(); ++c) {
    const int n = w.chunks[c].num_tokens;
    ::kvtier::PagedAttention(layout, pool.data(), std::span<const int32_t>(w.tables[c]), layer, w.chunks[c].start_position, n,
                   w.num_heads, q.data() + token * row, out.data() + token * row, cuda_test::ReferencePool(),
                   options);
    token += n;
  }
  return out;
}

using AttentionCase = cuda_test::AttentionShape;

class KvFp8AttentionTest : public cuda_test::CudaParamTest<AttentionCase> {};

// DecodeAttention over one decode row per chunk of `shapes` (fp8 KV) against the CPU on the
// same bytes (one reference), for each of `configs`: {max_splits (0: DecodeMaxSplits' choice
// for the rows), DecodeAttentionParams::fp8_scales_after_products and ::fp8_pair_tiles (-1:
// the library's; 2: f16 products)}. Q uniform in [-q_magnitude, q_magnitude].
struct DecodeConfig {
  int splits = 0;
  int fold = -1;
  int pair = -1;
};

// Every row of every chunk's blocks past its context as a never-written row may be: NaN codes
// and a NaN scale (the kernels must not let them reach an output).
void PoisonPastTheContexts(const cuda_test::PagedWorld& w, const KvLayout& layout, std::vector<uint8_t>* pool) {
  const int64_t bt = layout.block_tokens, d = layout.head_dim, heads = layout.num_kv_heads;
  const int64_t elements = layout.ElementsPerBlock();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t c = 0; c < w.chunks.size(); ++c) {
    const int64_t ctx = w.chunks[c].start_position + w.chunks[c].num_tokens;
    for (int64_t pos = ctx; pos < static_cast<int64_t>(w.tables[c].size()) * bt; ++pos) {
      uint8_t* block = pool->data() + static_cast<int64_t>(w.tables[c][pos / bt]) * layout.BlockBytes();
      for (int64_t slice = 0; slice < 2 * layout.num_layers * heads; ++slice) {  // (layer, k|v, kv head)
        const int64_t row = slice * bt + pos % bt;
        std::memset(block + row * d, 0x7f, d);
        std::memcpy(block + elements + row * sizeof(float), &nan, sizeof(float));
      }
    }
  }
}

void CheckDecodeOnTheSameBytes(const AttentionCase& p, const std::vector<cuda::ChunkShape>& shapes,
                               const std::vector<DecodeConfig>& configs, std::mt19937& rng,
                               bool poison_past_contexts = false, const AttentionScores& scores = {},
                               float q_magnitude = 2.0f) {
  cuda_test::PagedWorld w(p.heads, p.kv_heads, p.head_dim, p.block_tokens, shapes, rng);
  const KvLayout layout = Fp8Layout(2, p.kv_heads, p.head_dim, p.block_tokens);
  std::vector<uint8_t> pool = RandomFp8Pool(layout, w.num_blocks, rng);
  if (poison_past_contexts) PoisonPastTheContexts(w, layout, &pool);
  cuda_test::ForEachElem([&]<typename T>() {
    const int layer = 1;
    const int rows = w.num_tokens;
    Data16 q = Random16<T>(w.QElements(), rng, -q_magnitude, q_magnitude);
    const std::vector<float> ref = CpuReference(w, layout, pool, q.values, layer, scores);
    std::vector<int32_t> row_ids(rows);
    for (int i = 0; i < rows; ++i) row_ids[i] = i;
    DeviceArray<uint8_t> d_pool(pool.size());
    DeviceArray<uint16_t> d_q(q.bits.size()), d_out(q.bits.size());
    DeviceArray<int32_t> d_rows(rows), d_chunk(rows), d_pos(rows), d_indptr(w.indptr.size()),
        d_indices(w.indices.size());
    DeviceArray<float> d_po(DecodePartialFloats(rows, kDecodeMaxSplitsLimit, p.heads, p.head_dim)),
        d_pml(DecodePartialMlFloats(rows, kDecodeMaxSplitsLimit, p.heads));
    DeviceArray<uint32_t> d_counters(DecodeCounterInts(rows, p.kv_heads));
    CUDA_ASSERT(cudaMemset(d_counters.get(), 0, d_counters.size() * sizeof(uint32_t)));
    d_pool.Upload(pool);
    d_q.Upload(q.bits);
    d_rows.Upload(row_ids);
    d_chunk.Upload(w.token_chunk);
    d_pos.Upload(w.token_pos);
    d_indptr.Upload(w.indptr);
    d_indices.Upload(w.indices);
    for (const DecodeConfig& config : configs) {
      const int splits =
          config.splits > 0
              ? config.splits
              : DecodeMaxSplits(rows, p.kv_heads, cuda_test::DecodeWave(p.head_dim, true, p.block_tokens, config.pair));
      SCOPED_TRACE(::testing::Message() << "max_splits " << splits << ", fp8_scales_after_products " << config.fold
                                        << ", fp8_pair_tiles " << config.pair);
      DecodeAttentionParams<T> params;
      params.q = reinterpret_cast<const T*>(d_q.get());
      params.out = reinterpret_cast<T*>(d_out.get());
      params.rows = d_rows.get();
      params.num_rows = rows;
      params.num_heads = p.heads;
      params.layer = layer;
      params.max_splits = splits;
      params.partial_out = d_po.get();
      params.partial_ml = d_pml.get();
      params.split_counters = d_counters.get();
      params.fp8_scales_after_products = config.fold;
      params.fp8_pair_tiles = config.pair;
      params.scores = scores;
      d_out.Poison();
      ASSERT_EQ(DecodeAttention(params, StepTokens{d_chunk.get(), d_pos.get(), rows},
                                Fp8Kv<T>(layout, d_pool.get(), d_indices.get(), d_indptr.get()), nullptr,
                                cuda_test::kDefaultLaunch),
                cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      const std::vector<float> out = ToF32<T>(d_out.Download());
      const size_t row = static_cast<size_t>(p.heads) * p.head_dim;
      for (int i = 0; i < rows; ++i) {
        const std::vector<float> got(out.begin() + i * row, out.begin() + (i + 1) * row);
        const std::vector<float> want(ref.begin() + i * row, ref.begin() + (i + 1) * row);
        // K and V are rounded to T after dequantization (or unscaled codes, exact, with the
        // scales on S and P) and P to T before P.V.
        EXPECT_LT(RelativeError(got, want), Tolerance<T>()) << "ctx " << w.token_pos[i] + 1;
      }
    }
  });
}

TEST_P(KvFp8AttentionTest, DecodeMatchesCpuOnTheSameBytes) {
  // One token per chunk (decode rows) at contexts from 1 to past several splits.
  std::vector<cuda::ChunkShape> shapes;
  for (int64_t ctx : {1, 2, 17, 64, 100, 1000, 3001}) shapes.push_back(cuda::ChunkShape{1, ctx - 1});
  CheckDecodeOnTheSameBytes(GetParam(), shapes,
                            {{0, -1}, {0, 0}, {0, 1, 0}, {0, 1, 1}, {2, 1, 1}, {0, 1, 2}, {2, 1, 2}}, rng_);
}

// The f16 products' scales: queries far below and far above 1 (f16's subnormals, and products
// past f16's range without the power-of-two scale) give the reference's output on both pair
// forms; the pool's V scales already span four decades.
TEST_P(KvFp8AttentionTest, DecodeHalfProductsKeepTinyAndLargeQueries) {
  std::vector<cuda::ChunkShape> shapes;
  for (int64_t ctx : {1, 33, 100, 1000}) shapes.push_back(cuda::ChunkShape{1, ctx - 1});
  for (float magnitude : {1e-6f, 3e4f}) {
    SCOPED_TRACE(::testing::Message() << "q magnitude " << magnitude);
    CheckDecodeOnTheSameBytes(GetParam(), shapes, {{0, 1, 1}, {0, 1, 2}, {3, 1, 2}}, rng_, false, {}, magnitude);
  }
}

// Unwritten rows after each context (NaN codes and scales) change no output, on every path:
// rows past the end are clamped or masked, never multiplied by a zero probability.
TEST_P(KvFp8AttentionTest, DecodeIgnoresUnwrittenRowsPastTheContext) {
  std::vector<cuda::ChunkShape> shapes;
  for (int64_t ctx : {1, 5, 16, 17, 31, 33, 47, 100, 1001}) shapes.push_back(cuda::ChunkShape{1, ctx - 1});
  CheckDecodeOnTheSameBytes(GetParam(), shapes, {{0, 0}, {0, 1, 0}, {0, 1, 1}, {3, 1, 1}, {0, 1, 2}, {3, 1, 2}}, rng_,
                            /*poison_past_contexts=*/true);
}

// One long row (W8's case, shortened): every split holds hundreds of positions, at the
// library's split count for one row, 7 and the kernel's largest, both fp8 forms.
TEST_P(KvFp8AttentionTest, LongContextDecodeMatchesCpuAtEverySplitCount) {
  const std::vector<cuda::ChunkShape> shapes = {cuda::ChunkShape{1, 40000 - 1}};
  CheckDecodeOnTheSameBytes(GetParam(), shapes,
                            {{0, 0}, {0, 1, 0}, {0, 1, 1}, {7, 0}, {7, 1, 0}, {7, 1, 1}, {kDecodeMaxSplitsLimit, 0},
                             {kDecodeMaxSplitsLimit, 1, 0}, {kDecodeMaxSplitsLimit, 1, 1}, {0, 1, 2}, {7, 1, 2},
                             {kDecodeMaxSplitsLimit, 1, 2}},
                            rng_);
}

// Every row before the 128-position boundary at or below each chunk's first query's window
// start, as PoisonPastTheContexts poisons (no prefill kernel visits a KV tile before it).
void PoisonBeforeTheWindows(const cuda_test::PagedWorld& w, const KvLayout& layout, int window,
                            std::vector<uint8_t>* pool) {
  if (window <= 0) return;
  const int64_t bt = layout.block_tokens, d = layout.head_dim, heads = layout.num_kv_heads;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t c = 0; c < w.chunks.size(); ++c) {
    const int64_t first_read = std::max<int64_t>(0, w.chunks[c].start_position - window + 1) / 128 * 128;
    for (int64_t pos = 0; pos < first_read; ++pos) {
      uint8_t* block = pool->data() + static_cast<int64_t>(w.tables[c][pos / bt]) * layout.BlockBytes();
      for (int64_t slice = 0; slice < 2 * layout.num_layers * heads; ++slice) {  // (layer, k|v, kv head)
        const int64_t row = slice * bt + pos % bt;
        std::memset(block + row * d, 0x7f, d);
        std::memcpy(block + layout.ElementsPerBlock() + row * sizeof(float), &nan, sizeof(float));
      }
    }
  }
}

const std::vector<cuda::ChunkShape> kPrefillShapes = {{1, 0},      {3, 5},      {16, 0},  {17, 100},
                                                      {100, 1000}, {300, 1037}, {64, 64}};

// PrefillAttention over an fp8 pool against the CPU on the same bytes, on every kernel that
// takes `scores` (wgmma: bf16), chunks of `shapes` over cached context. With
// `poison_unread`, the rows no kernel may read (past each context, before each window's first
// KV tile) are NaN on the device; the CPU reads the clean pool (the same bytes wherever it reads).
void CheckPrefillOnTheSameBytes(const AttentionCase& p, const AttentionScores& scores, std::mt19937& rng,
                                const std::vector<cuda::ChunkShape>& shapes = kPrefillShapes,
                                bool poison_unread = false) {
  cuda_test::PagedWorld w(p.heads, p.kv_heads, p.head_dim, p.block_tokens, shapes, rng);
  const KvLayout layout = Fp8Layout(2, p.kv_heads, p.head_dim, p.block_tokens);
  const std::vector<uint8_t> pool = RandomFp8Pool(layout, w.num_blocks, rng);
  std::vector<uint8_t> device_pool = pool;
  if (poison_unread) {
    PoisonPastTheContexts(w, layout, &device_pool);
    PoisonBeforeTheWindows(w, layout, scores.window, &device_pool);
  }
  std::vector<PrefillChunk> chunks;
  int32_t token = 0;
  for (size_t c = 0; c < w.chunks.size(); ++c) {
    chunks.push_back(PrefillChunk{static_cast<int32_t>(c), token, w.chunks[c].num_tokens, w.chunks[c].start_position});
    token += w.chunks[c].num_tokens;
  }
  cuda_test::ForEachElem([&]<typename T>() {
    std::vector<PrefillKernel> kernels = {PrefillKernel::kMma};
    if (std::is_same_v<T, bf16> && PrefillWgmmaSupported(true, p.head_dim, p.heads, p.kv_heads) &&
        SkinnyGemmDeviceOk(0)) {
      kernels.push_back(PrefillKernel::kWgmma);
    }
    for (const PrefillKernel kernel : kernels) {
      SCOPED_TRACE(kernel == PrefillKernel::kMma ? "mma" : "wgmma");
      std::vector<PrefillTile> tiles;
      PlanPrefillTiles(chunks, PrefillTileTokens(p.head_dim, p.heads / p.kv_heads, kernel), &tiles);
      const int layer = 0;
      Data16 q = Random16<T>(w.QElements(), rng, -2, 2);
      DeviceArray<uint8_t> d_pool(device_pool.size());
      DeviceArray<uint16_t> d_q(q.bits.size()), d_out(q.bits.size());
      DeviceArray<int32_t> d_indptr(w.indptr.size()), d_indices(w.indices.size());
      DeviceArray<PrefillTile> d_tiles(tiles.size());
      d_pool.Upload(device_pool);
      d_q.Upload(q.bits);
      d_indptr.Upload(w.indptr);
      d_indices.Upload(w.indices);
      d_tiles.Upload(tiles);
      PrefillAttentionParams<T> params;
      params.q = reinterpret_cast<const T*>(d_q.get());
      params.out = reinterpret_cast<T*>(d_out.get());
      params.tiles = d_tiles.get();
      params.num_tiles = static_cast<int32_t>(tiles.size());
      params.num_heads = p.heads;
      params.layer = layer;
      params.kernel = kernel;
      params.scores = scores;
      d_out.Poison();
      ASSERT_EQ(PrefillAttention(params, Fp8Kv<T>(layout, d_pool.get(), d_indices.get(), d_indptr.get()), nullptr),
                cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      const std::vector<float> out = ToF32<T>(d_out.Download());
      const std::vector<float> ref = CpuReference(w, layout, pool, q.values, layer, scores);
      const size_t row = static_cast<size_t>(p.heads) * p.head_dim;
      for (const PrefillChunk& c : chunks) {
        const std::vector<float> got(out.begin() + c.token_begin * row, out.begin() + (c.token_begin + c.num_tokens) * row);
        const std::vector<float> want(ref.begin() + c.token_begin * row,
                                      ref.begin() + (c.token_begin + c.num_tokens) * row);
        EXPECT_LT(RelativeError(got, want), Tolerance<T>())
            << "chunk " << c.chunk << " start " << c.start_position << " tokens " << c.num_tokens;
      }
    }
  });
}

TEST_P(KvFp8AttentionTest, PrefillMatchesCpuOnTheSameBytes) { CheckPrefillOnTheSameBytes(GetParam(), {}, rng_); }

// Scores that are not plain (Gemma 2's scale and soft-cap; sliding windows within a tile,
// across tiles and blocks, longer than most contexts) over fp8 KV, on the same bytes as the
// CPU: what lets KernelSelection serve fp8 KV to such models.
const AttentionScores kOtherScores[] = {{1.0f / std::sqrt(224.0f), 5.0f, 0}, {0.0f, 0.0f, 5}, {0.0f, 30.0f, 37},
                                        {0.3f, 0.0f, 700}};

TEST_P(KvFp8AttentionTest, PrefillAppliesScaleSoftCapAndWindowOnTheSameBytes) {
  for (const AttentionScores& scores : kOtherScores) {
    SCOPED_TRACE(::testing::Message() << "scale " << scores.scale << " cap " << scores.logit_softcap << " window "
                                      << scores.window);
    CheckPrefillOnTheSameBytes(GetParam(), scores, rng_);
  }
}

// Gemma 2's scores on the wgmma kernel's scored instances (bf16 compute; the mma.sync kernel
// alongside): scale 1/16 (query_pre_attn_scalar 256) with soft-caps 50 and 5, windows 5, 37, 700
// and 4096 over a ragged batch of 1 to 700 queries from position 0 and past cached prefixes up
// to 4500 deep, with NaN rows wherever no kernel may read.
TEST_P(KvFp8AttentionTest, PrefillWgmmaAppliesGemmaScoresOnTheSameBytes) {
  const std::vector<cuda::ChunkShape> shapes = {{1, 0},     {3, 5},     {129, 0},   {17, 100},  {100, 1000},
                                                {700, 900}, {64, 64},   {300, 4090}, {1, 4500}, {200, 4300}};
  const float gemma2_scale = 1.0f / 16.0f;
  const AttentionScores cases[] = {{gemma2_scale, 50.0f, 0}, {gemma2_scale, 5.0f, 0},    {gemma2_scale, 50.0f, 5},
                                   {gemma2_scale, 5.0f, 37}, {gemma2_scale, 50.0f, 700}, {gemma2_scale, 50.0f, 4096}};
  for (const AttentionScores& scores : cases) {
    SCOPED_TRACE(::testing::Message() << "scale " << scores.scale << " cap " << scores.logit_softcap << " window "
                                      << scores.window);
    CheckPrefillOnTheSameBytes(GetParam(), scores, rng_, shapes, /*poison_unread=*/true);
  }
}

TEST_P(KvFp8AttentionTest, DecodeAppliesScaleSoftCapAndWindowOnTheSameBytes) {
  std::vector<cuda::ChunkShape> shapes;
  for (int64_t ctx : {1, 5, 6, 17, 38, 100, 701, 3001}) shapes.push_back(cuda::ChunkShape{1, ctx - 1});
  for (const AttentionScores& scores : kOtherScores) {
    SCOPED_TRACE(::testing::Message() << "scale " << scores.scale << " cap " << scores.logit_softcap << " window "
                                      << scores.window);
    CheckDecodeOnTheSameBytes(GetParam(), shapes, {{0, -1}, {0, 0}, {0, 1, 0}, {0, 1, 1}, {3, 1, 1}, {0, 1, 2}}, rng_,
                              /*poison_past_contexts=*/true, scores);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvFp8AttentionTest,
                         ::testing::Values(AttentionCase{8, 2, 128, 16},  // Llama-3 GQA 4
                                           AttentionCase{4, 4, 64, 16},   // MHA, head_dim 64
                                           AttentionCase{14, 2, 128, 32}, // group 7, other blocks
                                           AttentionCase{6, 2, 64, 8}),   // group 3, blocks of 8
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           const AttentionCase& c = info.param;
                           return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
                                  std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens);
                         });

}  // namespace
}  // namespace kvtier::cuda
