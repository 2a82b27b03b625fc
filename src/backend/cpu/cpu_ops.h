// Reference operators of the Llama-family forward, fp32, plain loops (optionally split
// over a ThreadPool). They define the semantics every other backend is tested against
// (tests/backend/*), so clarity beats speed here. Stateless; thread-safe.
#ifndef KVTIER_BACKEND_CPU_CPU_OPS_H_
#define KVTIER_BACKEND_CPU_CPU_OPS_H_

#include <cstdint>
#include <optional>
#include <span>

#include "backend/cpu/kv_block_view.h"
#include "backend/kv_layout.h"
#include "model/config.h"

namespace kvtier {

class ThreadPool;  // common/thread_pool.h; nullptr means run on the calling thread.

// out[t, :] = table[tokens[t], :].  table: (vocab, dim), tokens: (rows), out: (rows, dim).
// Tokens must already be validated to lie in [0, vocab).
void EmbeddingLookup(const float* table, const int32_t* tokens, int64_t rows, int64_t dim,
                     float* out);

// x[i] += y[i] for i < count (the residual connection).
void AddInPlace(float* x, const float* y, int64_t count);

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight.  x, out: (rows, dim).
// out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, double eps,
             float* out, ThreadPool* pool);

// out[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]).  x: (rows, k_dim), w: (n_dim, k_dim)
// row-major as in HF Linear, bias: (n_dim) or nullptr, out: (rows, n_dim).
// Sums in fp32 over 8 interleaved partial sums folded pairwise; each output's bits depend
// only on its own row and weights, never on the thread count or the other rows.
void MatMulTransposed(const float* x, const float* w, const float* bias, int64_t rows,
                      int64_t k_dim, int64_t n_dim, float* out, ThreadPool* pool);

// Inverse frequencies of RoPE for head_dim (head_dim/2 values), with llama3 scaling when
// given (HF _compute_llama3_parameters), reproducing transformers' float32 arithmetic.
void RopeInverseFrequencies(int64_t head_dim, double theta,
                            const std::optional<Llama3RopeScaling>& scaling, float* inv_freq);

// Applies rotary embedding in place, HF "rotate_half" convention: for i < head_dim/2,
// (x[i], x[i + head_dim/2]) rotated by angle position * inv_freq[i].
// x: (rows, num_heads, head_dim); positions: (rows).
// As HF in fp32: angle = inv_freq[i] * float(position), then cosf/sinf.
void ApplyRope(float* x, const int64_t* positions, int64_t rows, int64_t num_heads,
               int64_t head_dim, const float* inv_freq);

// out[i] = silu(gate[i]) * up[i]; gate_up: (rows, 2 * dim) with gate first then up per
// row is NOT assumed: gate and up are separate (rows, dim) arrays. out may alias gate.
void SiluMul(const float* gate, const float* up, int64_t count, float* out);

// Stores k, v (rows, num_kv_heads, head_dim) of one layer for positions
// start_position .. start_position+rows-1 of one sequence into its blocks.
// kv_pool: num_blocks x layout.BlockBytes() bytes (f32 elements, or for kF8E4M3 codes and
// per-row scales as kv_layout.h says); block_table covers those positions. fp8 rows are
// quantized here: scale = amax / 448 (1 for an all-zero row), code = e4m3(x / scale).
// The view form writes through a KvBlockView (kv_block_view.h): only device blocks.
void WriteKv(const KvBlockView& kv, int64_t layer, int64_t start_position, int64_t rows, const float* k,
             const float* v);
void WriteKv(const KvLayout& layout, void* kv_pool, std::span<const int32_t> block_table,
             int64_t layer, int64_t start_position, int64_t rows, const float* k, const float* v);

// Causal attention of one sequence's new queries over its paged KV (which already holds
// positions [0, start_position + rows)). q: (rows, num_heads, head_dim) for positions
// start_position..; out: (rows, num_heads, head_dim). GQA: query head h reads kv head
// h / (num_heads / num_kv_heads). Scale 1/sqrt(head_dim), softmax in fp32.
// fp8 KV rows are read back as code x scale in fp32.
// Positions are read in order whichever tier the view finds them in (kv_block_view.h), so
// host-resident blocks change no bit of the result, in either KV format.
void PagedAttention(const KvBlockView& kv, int64_t layer, int64_t start_position, int64_t rows,
                    int64_t num_heads, const float* q, float* out, ThreadPool* pool);
void PagedAttention(const KvLayout& layout, const void* kv_pool,
                    std::span<const int32_t> block_table, int64_t layer, int64_t start_position,
                    int64_t rows, int64_t num_heads, const float* q, float* out, ThreadPool* pool);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_CPU_OPS_H_
