// Reference fp32 operators of the Llama-family forward (semantics in cpu_ops.h). Stateless;
// thread-safe. Every output element is computed by one thread in a fixed order, so results
// do not depend on the thread count or on which other rows share a call.
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/fold_lanes.h"
#include "common/fp8_e4m3.h"
#include "common/thread_pool.h"

namespace kvtier {
namespace {

// Runs fn over [0, n) on the pool, or inline without one.
void For(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, fn);
}

// Dot products in fp32 with kLanes independent partial sums per output: the fixed lane
// structure lets the compiler vectorise without -ffast-math while keeping the summation
// order defined. DotRows computes several outputs sharing one weight row with exactly the
// same order per output as Dot, so a row's result never depends on how rows are grouped.
using cpu_lanes::FoldLanes;
using cpu_lanes::kLanes;

[[gnu::always_inline]] inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[k + l] * b[k + l];
  }
  for (int l = 0; k < n; ++k, ++l) acc[l] += a[k] * b[k];
  return FoldLanes(acc);
}

// out[r * out_stride] = Dot(x + r * x_stride, w, n) for r < kRows.
template <int kRows>
[[gnu::always_inline]] inline void DotRows(const float* x, int64_t x_stride, const float* w,
                                           int64_t n, float* out, int64_t out_stride) {
  float acc[kRows][kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int r = 0; r < kRows; ++r) {
      for (int l = 0; l < kLanes; ++l) acc[r][l] += x[r * x_stride + k + l] * w[k + l];
    }
  }
  for (int l = 0; k < n; ++k, ++l) {
    for (int r = 0; r < kRows; ++r) acc[r][l] += x[r * x_stride + k] * w[k];
  }
  for (int r = 0; r < kRows; ++r) out[r * out_stride] = FoldLanes(acc[r]);
}

// y[i] += a * x[i].
void Axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void EmbeddingLookup(const float* table, const int32_t* tokens, int64_t rows, int64_t dim,
                     float* out) {
  for (int64_t t = 0; t < rows; ++t) {
    std::memcpy(out + t * dim, table + static_cast<int64_t>(tokens[t]) * dim,
                static_cast<size_t>(dim) * sizeof(float));
  }
}

void AddInPlace(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, double eps,
             float* out, ThreadPool* pool) {
  // HF LlamaRMSNorm in fp32: weight * (x * rsqrt(mean(x^2) + eps)).
  const float eps_f = static_cast<float>(eps);
  For(pool, rows, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* xr = x + t * dim;
      float* outr = out + t * dim;
      const float mean_square = Dot(xr, xr, dim) / static_cast<float>(dim);
      const float inv_rms = 1.0f / std::sqrt(mean_square + eps_f);
      for (int64_t i = 0; i < dim; ++i) outr[i] = weight[i] * (xr[i] * inv_rms);
    }
  });
}

namespace {

// Output features [n0, n1) for every row; w points at weight row n0.
[[gnu::always_inline]] inline void MatMulTileBody(const float* x, const float* w,
                                                  const float* bias, int64_t rows,
                                                  int64_t k_dim, int64_t n_dim, int64_t n0,
                                                  int64_t n1, float* out) {
  constexpr int kRowGroup = 4;  // rows that share each weight load
  int64_t t = 0;
  for (; t + kRowGroup <= rows; t += kRowGroup) {
    for (int64_t n = n0; n < n1; ++n) {
      DotRows<kRowGroup>(x + t * k_dim, k_dim, w + (n - n0) * k_dim, k_dim, out + t * n_dim + n,
                         n_dim);
    }
  }
  for (; t < rows; ++t) {
    for (int64_t n = n0; n < n1; ++n) {
      out[t * n_dim + n] = Dot(x + t * k_dim, w + (n - n0) * k_dim, k_dim);
    }
  }
  if (bias != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t n = n0; n < n1; ++n) out[r * n_dim + n] += bias[n];
    }
  }
}

using MatMulTileFn = void (*)(const float*, const float*, const float*, int64_t, int64_t,
                              int64_t, int64_t, int64_t, float*);

void MatMulTileBaseline(const float* x, const float* w, const float* bias, int64_t rows,
                        int64_t k_dim, int64_t n_dim, int64_t n0, int64_t n1, float* out) {
  MatMulTileBody(x, w, bias, rows, k_dim, n_dim, n0, n1, out);
}

#if defined(__x86_64__)
// The same code compiled for AVX2, chosen at run time. The lane structure of Dot fixes
// every operation and contraction into FMA is off, so it produces the same bits, faster.
// (Explicit dispatch, not target_clones: ifunc resolvers crash under sanitizers.)
__attribute__((target("avx2"))) void MatMulTileAvx2(const float* x, const float* w,
                                                    const float* bias, int64_t rows,
                                                    int64_t k_dim, int64_t n_dim, int64_t n0,
                                                    int64_t n1, float* out) {
  MatMulTileBody(x, w, bias, rows, k_dim, n_dim, n0, n1, out);
}
#endif

MatMulTileFn SelectMatMulTile() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return MatMulTileAvx2;
#endif
  return MatMulTileBaseline;
}

}  // namespace

void MatMulTransposedTile(const float* x, const float* w_rows, const float* bias, int64_t rows,
                          int64_t k_dim, int64_t n_dim, int64_t n0, int64_t n1, float* out) {
  static const MatMulTileFn tile_fn = SelectMatMulTile();
  tile_fn(x, w_rows, bias, rows, k_dim, n_dim, n0, n1, out);
}

void MatMulTransposed(const float* x, const float* w, const float* bias, int64_t rows,
                      int64_t k_dim, int64_t n_dim, float* out, ThreadPool* pool) {
  // Work items are tiles of kTile weight rows; each tile is applied to every input row, so
  // a tile is read from memory once and then served from cache for all rows.
  constexpr int64_t kTile = 16;
  const int64_t num_tiles = (n_dim + kTile - 1) / kTile;
  For(pool, num_tiles, [&](int64_t tile_begin, int64_t tile_end) {
    const int64_t n_end = std::min(n_dim, tile_end * kTile);
    for (int64_t n0 = tile_begin * kTile; n0 < n_end; n0 += kTile) {
      MatMulTransposedTile(x, w + n0 * k_dim, bias, rows, k_dim, n_dim, n0, std::min(n_end, n0 + kTile), out);
    }
  });
}

void RopeInverseFrequencies(int64_t head_dim, double theta,
                            const std::optional<Llama3RopeScaling>& scaling, float* inv_freq) {
  // Mirrors transformers' float32 tensor arithmetic step by step: python scalars become
  // float32 operands, `s / t` is reciprocal(t) * s, and pow is rounded once to float.
  const int64_t half = head_dim / 2;
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    // _compute_default_rope_parameters: 1.0 / (base ** (arange(0, dim, 2).float() / dim)).
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(base), exponent));
    inv_freq[i] = 1.0f / power;
  }
  if (!scaling.has_value()) return;

  // _compute_llama3_parameters.
  const float factor = static_cast<float>(scaling->factor);
  const double old_context_len =
      static_cast<double>(scaling->original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(old_context_len / scaling->low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(old_context_len / scaling->high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float low_freq_factor = static_cast<float>(scaling->low_freq_factor);
  const float freq_factor_span =
      static_cast<float>(scaling->high_freq_factor - scaling->low_freq_factor);
  for (int64_t i = 0; i < half; ++i) {
    const float inv = inv_freq[i];
    const float wavelen = (1.0f / inv) * two_pi;
    // wavelen > low_freq_wavelen: divide by factor; wavelen < high_freq_wavelen: keep.
    const float inv_llama = wavelen > low_freq_wavelen ? inv / factor : inv;
    const bool is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (is_medium_freq) {
      const float smooth =
          ((1.0f / wavelen) * static_cast<float>(old_context_len) - low_freq_factor) /
          freq_factor_span;
      inv_freq[i] = (1.0f - smooth) * inv_llama / factor + smooth * inv_llama;
    } else {
      inv_freq[i] = inv_llama;
    }
  }
}

void LongRopeInverseFrequencies(int64_t head_dim, double theta, std::span<const double> factors,
                                float* inv_freq) {
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(base), exponent));
    inv_freq[i] = 1.0f / (static_cast<float>(factors[static_cast<size_t>(i)]) * power);
  }
}

void ApplyRope(float* x, const int64_t* positions, int64_t rows, int64_t num_heads,
               int64_t head_dim, const float* inv_freq, float attention_scaling) {
  // HF: freqs = inv_freq * float(position); q * cos + rotate_half(q) * sin, all fp32.
  const int64_t half = head_dim / 2;
  std::vector<float> cos_row(half), sin_row(half);
  for (int64_t t = 0; t < rows; ++t) {
    const float position = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * position;
      cos_row[i] = std::cos(angle) * attention_scaling;
      sin_row[i] = std::sin(angle) * attention_scaling;
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* xh = x + (t * num_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xh[i];
        const float x2 = xh[i + half];
        xh[i] = x1 * cos_row[i] + (-x2) * sin_row[i];
        xh[i + half] = x2 * cos_row[i] + x1 * sin_row[i];
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void ScaleInPlace(float* x, int64_t count, float scale) {
  for (int64_t i = 0; i < count; ++i) x[i] *= scale;
}

void SoftCap(float* x, int64_t count, float cap) {
  for (int64_t i = 0; i < count; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

void GeluTanhMul(const float* gate, const float* up, int64_t count, float* out) {
  const float beta = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
  const float kappa = 0.044715f;
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    const float inner = beta * (g + kappa * g * g * g);
    out[i] = 0.5f * g * (1.0f + std::tanh(inner)) * up[i];
  }
}

namespace {

void StoreRow(const KvLayout& layout, uint8_t* block, int64_t layer, int64_t kv, int64_t head, int64_t token,
              const float* row) {
  const int64_t offset = layout.ElementOffset(layer, kv, head, token);
  if (!layout.has_scales()) {
    std::memcpy(block + offset * sizeof(float), row, static_cast<size_t>(layout.head_dim) * sizeof(float));
    return;
  }
  float amax = 0.0f;
  for (int64_t d = 0; d < layout.head_dim; ++d) amax = std::max(amax, std::fabs(row[d]));
  const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
  for (int64_t d = 0; d < layout.head_dim; ++d) block[offset + d] = FloatToFp8E4M3(row[d] / scale);
  std::memcpy(block + layout.ScaleByteOffset(layer, kv, head, token), &scale, sizeof(scale));
}

// The row as fp32: a pointer into the block (f32), or decoded into `scratch` (fp8).
const float* LoadRow(const KvLayout& layout, const uint8_t* block, int64_t layer, int64_t kv, int64_t head,
                     int64_t token, float* scratch) {
  const int64_t offset = layout.ElementOffset(layer, kv, head, token);
  if (!layout.has_scales()) return reinterpret_cast<const float*>(block + offset * sizeof(float));
  float scale;
  std::memcpy(&scale, block + layout.ScaleByteOffset(layer, kv, head, token), sizeof(scale));
  for (int64_t d = 0; d < layout.head_dim; ++d) scratch[d] = Fp8E4M3ToFloat(block[offset + d]) * scale;
  return scratch;
}

// at[j - first]: the fp32 row of position j (kv 0: key, 1: value), for first <= j < end.
void RowPointers(const KvBlockView& kv, int64_t layer, int64_t kv_index, int64_t kv_head, int64_t first, int64_t end,
                 const float** at) {
  const KvLayout& layout = *kv.layout;
  for (int64_t j = first; j < end;) {
    const int64_t block = j / layout.block_tokens;
    const float* base = reinterpret_cast<const float*>(kv.Read(block)) + layout.ElementOffset(layer, kv_index, kv_head, 0);
    const int64_t block_end = std::min(end, (block + 1) * layout.block_tokens);
    for (; j < block_end; ++j) *at++ = base + (j - block * layout.block_tokens) * layout.head_dim;
  }
}

}  // namespace

void WriteKv(const KvBlockView& kv, int64_t layer, int64_t start_position, int64_t rows, const float* k,
             const float* v) {
  const KvLayout& layout = *kv.layout;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = start_position + r;
    uint8_t* block = kv.Write(position / layout.block_tokens);
    const int64_t token = position % layout.block_tokens;
    for (int64_t h = 0; h < kv.NumKvHeads(); ++h) {
      const int64_t src = (r * kv.NumKvHeads() + h) * layout.head_dim;
      StoreRow(layout, block, layer, 0, kv.FirstKvHead() + h, token, k + src);
      StoreRow(layout, block, layer, 1, kv.FirstKvHead() + h, token, v + src);
    }
  }
}

void WriteKv(const KvLayout& layout, void* kv_pool, std::span<const int32_t> block_table,
             int64_t layer, int64_t start_position, int64_t rows, const float* k, const float* v) {
  WriteKv(KvBlockView{&layout, kv_pool, block_table, {}, std::nullopt}, layer, start_position, rows, k, v);
}

void PagedAttention(const KvBlockView& kv, int64_t layer, int64_t start_position, int64_t rows,
                    int64_t num_heads, const float* q, float* out, ThreadPool* pool,
                    const AttentionOptions& options) {
  const KvLayout& layout = *kv.layout;
  const int64_t head_dim = layout.head_dim;
  const int64_t group = num_heads / kv.NumKvHeads();
  const float scale =
      options.scale.value_or(static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))));
  auto key_or_value = [&](int64_t kv_index, int64_t kv_head, int64_t position, float* scratch) {
    return LoadRow(layout, kv.Read(position / layout.block_tokens), layer, kv_index, kv_head,
                   position % layout.block_tokens, scratch);
  };
  // fp32 rows without a soft cap take the vector kernels (attention_rows.h): the same bits.
  const bool rows_kernels = !layout.has_scales() && !options.logit_softcap && HasAttentionRows(head_dim);
  For(pool, rows * num_heads, [&](int64_t begin, int64_t end) {
    // Scores of the item's query head, and of the next head where both share a KV head.
    std::vector<float> probs_of[2] = {std::vector<float>(start_position + rows), {}};
    if (rows_kernels) probs_of[1].resize(start_position + rows);
    std::vector<float> row(static_cast<size_t>(head_dim));  // an fp8 row decoded
    std::vector<const float*> rows_at(rows_kernels ? static_cast<size_t>(start_position + rows) : 0);
    for (int64_t item = begin; item < end;) {
      const int64_t r = item / num_heads;
      const int64_t h = item % num_heads;
      const int64_t kv_head = kv.FirstKvHead() + h / group;
      const int64_t num_keys = start_position + r + 1;  // causal: positions [0, own]
      // A window keeps the last `window` positions, own included.
      const int64_t first_key = options.window ? std::max<int64_t>(0, num_keys - *options.window) : 0;
      const int64_t count = num_keys - first_key;
      // Two heads of one group read the same keys: the vector kernel scores both in one pass.
      const int heads = rows_kernels && item + 1 < end && h + 1 < num_heads && (h + 1) / group == h / group ? 2 : 1;
      if (rows_kernels) {
        RowPointers(kv, layer, 0, kv_head, first_key, num_keys, rows_at.data());
        const float* qh = q + (r * num_heads + h) * head_dim;
        if (heads == 2) {
          AttentionScoresPair(qh, qh + head_dim, rows_at.data(), count, head_dim, scale,
                              probs_of[0].data() + first_key, probs_of[1].data() + first_key);
        } else {
          AttentionScores(qh, rows_at.data(), count, head_dim, scale, probs_of[0].data() + first_key);
        }
        RowPointers(kv, layer, 1, kv_head, first_key, num_keys, rows_at.data());
      }
      for (int i = 0; i < heads; ++i) {
        std::vector<float>& probs = probs_of[i];
        const float* qh = q + (r * num_heads + h + i) * head_dim;
        float max_score = -std::numeric_limits<float>::infinity();
        if (rows_kernels) {
          for (int64_t j = first_key; j < num_keys; ++j) max_score = std::max(max_score, probs[j]);
        } else {
          for (int64_t j = first_key; j < num_keys; ++j) {
            probs[j] = Dot(qh, key_or_value(0, kv_head, j, row.data()), head_dim) * scale;
            if (options.logit_softcap) probs[j] = std::tanh(probs[j] / *options.logit_softcap) * *options.logit_softcap;
            max_score = std::max(max_score, probs[j]);
          }
        }
        float sum = 0.0f;
        for (int64_t j = first_key; j < num_keys; ++j) {
          probs[j] = std::exp(probs[j] - max_score);
          sum += probs[j];
        }
        const float inv_sum = 1.0f / sum;
        float* oh = out + (r * num_heads + h + i) * head_dim;
        if (rows_kernels) {
          AttentionWeightedSum(rows_at.data(), probs.data() + first_key, inv_sum, count, head_dim, oh);
          continue;
        }
        std::fill(oh, oh + head_dim, 0.0f);
        for (int64_t j = first_key; j < num_keys; ++j) {
          Axpy(probs[j] * inv_sum, key_or_value(1, kv_head, j, row.data()), head_dim, oh);
        }
      }
      item += heads;
    }
  });
}

void PagedAttention(const KvLayout& layout, const void* kv_pool,
                    std::span<const int32_t> block_table, int64_t layer, int64_t start_position,
                    int64_t rows, int64_t num_heads, const float* q, float* out,
                    ThreadPool* pool, const AttentionOptions& options) {
  // The view never writes through its pool pointer here.
  PagedAttention(KvBlockView{&layout, const_cast<void*>(kv_pool), block_table, {}, std::nullopt}, layer, start_position,
                 rows, num_heads, q, out, pool, options);
}

}  // namespace kvtier
