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

// The outputs [n0, n1) of MatMulTransposed, on the calling thread, with w_rows pointing at
// weight row n0 (rows n0 .. n1-1 of the matrix, contiguous): the same bits MatMulTransposed
// gives them, for callers that hold the weights in another format and widen a tile at a time.
void MatMulTransposedTile(const float* x, const float* w_rows, const float* bias, int64_t rows,
                          int64_t k_dim, int64_t n_dim, int64_t n0, int64_t n1, float* out);

// Inverse frequencies of RoPE for head_dim (head_dim/2 values), with llama3 scaling when
// given (HF _compute_llama3_parameters), reproducing transformers' float32 arithmetic.
void RopeInverseFrequencies(int64_t head_dim, double theta,
                            const std::optional<Llama3RopeScaling>& scaling, float* inv_freq);

// Inverse frequencies of LongRoPE (HF _compute_longrope_parameters): 1 / (factors[i] *
// theta^(2i / head_dim)) in float32. factors: (head_dim / 2).
void LongRopeInverseFrequencies(int64_t head_dim, double theta, std::span<const double> factors,
                                float* inv_freq);

// Applies rotary embedding in place, HF "rotate_half" convention: for i < head_dim/2,
// (x[i], x[i + head_dim/2]) rotated by angle position * inv_freq[i].
// x: (rows, num_heads, head_dim); positions: (rows).
// As HF in fp32: angle = inv_freq[i] * float(position), then cosf/sinf, each multiplied by
// attention_scaling (LongRoPE's attention factor; 1 otherwise).
void ApplyRope(float* x, const int64_t* positions, int64_t rows, int64_t num_heads,
               int64_t head_dim, const float* inv_freq, float attention_scaling = 1.0f);

// x[i] *= scale (Gemma's embedding normalizer).
void ScaleInPlace(float* x, int64_t count, float scale);

// x[i] = cap * tanh(x[i] / cap): Gemma's soft-capping of attention scores and logits.
void SoftCap(float* x, int64_t count, float cap);

// out[i] = silu(gate[i]) * up[i]; gate_up: (rows, 2 * dim) with gate first then up per
// row is NOT assumed: gate and up are separate (rows, dim) arrays. out may alias gate.
void SiluMul(const float* gate, const float* up, int64_t count, float* out);

// out[i] = gelu_tanh(gate[i]) * up[i], GELU with the tanh approximation (torch's
// approximate="tanh"): 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). out may alias gate.
void GeluTanhMul(const float* gate, const float* up, int64_t count, float* out);

// Stores k, v (rows, num_kv_heads, head_dim) of one layer for positions
// start_position .. start_position+rows-1 of one sequence into its blocks.
// kv_pool: num_blocks x layout.BlockBytes() bytes (f32 elements, or for kF8E4M3 codes and
// per-row scales as kv_layout.h says); block_table covers those positions. fp8 rows are
// quantized here: scale = amax / 448 (1 for an all-zero row), code = e4m3(x / scale).
// The view form writes through a KvBlockView (kv_block_view.h): only device blocks, and only
// the view's heads (k, v then hold (rows, view.NumKvHeads(), head_dim)).
void WriteKv(const KvBlockView& kv, int64_t layer, int64_t start_position, int64_t rows, const float* k,
             const float* v);
void WriteKv(const KvLayout& layout, void* kv_pool, std::span<const int32_t> block_table,
             int64_t layer, int64_t start_position, int64_t rows, const float* k, const float* v);

// How one layer's attention scores are formed (defaults: the Llama family's).
struct AttentionOptions {
  std::optional<float> scale;           // q.k multiplier; nullopt: 1/sqrt(head_dim)
  std::optional<float> logit_softcap;   // scores = cap * tanh(scores / cap) before masking
  std::optional<int64_t> window;        // the query at p reads keys in (p - window, p]
};

// Causal attention of one sequence's new queries over its paged KV (which already holds
// positions [0, start_position + rows)). q: (rows, num_heads, head_dim) for positions
// start_position..; out: (rows, num_heads, head_dim). GQA: query head h reads kv head
// h / (num_heads / num_kv_heads) (in the view form, of the view's heads: q holds the query
// heads of those, and head h reads view head FirstKvHead() + h / (num_heads / NumKvHeads())).
// Scale and window from `options`, softmax in fp32.
// fp8 KV rows are read back as code x scale in fp32.
// Positions are read in order whichever tier the view finds them in (kv_block_view.h), so
// host-resident blocks change no bit of the result, in either KV format.
void PagedAttention(const KvBlockView& kv, int64_t layer, int64_t start_position, int64_t rows,
                    int64_t num_heads, const float* q, float* out, ThreadPool* pool,
                    const AttentionOptions& options = {});
void PagedAttention(const KvLayout& layout, const void* kv_pool,
                    std::span<const int32_t> block_table, int64_t layer, int64_t start_position,
                    int64_t rows, int64_t num_heads, const float* q, float* out, ThreadPool* pool,
                    const AttentionOptions& options = {});

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_CPU_OPS_H_
