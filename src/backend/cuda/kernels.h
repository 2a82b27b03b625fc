// CUDA kernels of the Llama-family forward, behind plain host launchers (16-bit weights,
// activations and KV, fp32 accumulation). Each launcher enqueues on `stream` and returns at
// once; the semantics of each match an operator of backend/cpu/cpu_ops.h
// (tests/backend_cuda). Launchers templated on T are instantiated for T = bf16 and T = f16
// (the checkpoint's dtype: weights stay resident as stored). Launchers of kernels that use
// programmatic dependent launch take CudaLaunchOptions: it changes how they launch, never
// what they compute. Stateless; thread-safe as long as callers use distinct buffers.
#ifndef KVTIER_BACKEND_CUDA_KERNELS_H_
#define KVTIER_BACKEND_CUDA_KERNELS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gate_activation.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

// The paged KV pool of one backend as the kernels see it (FlashInfer's paged_kv_t):
// block ids of chunk c are indices[indptr[c] .. indptr[c+1]), entry j covering positions
// [j*block_tokens, (j+1)*block_tokens). Passed by value.
//
// Host-resident blocks of a long sequence (docs/LONG_CONTEXT.md) are read from `staged`, a
// device copy of this layer's slice of each of them: a table entry e < 0 names staged slot
// -1 - e, whose (k|v, kv head, token, dim) elements start at staged + (-1 - e) *
// layer_elements. Only the attention kernels (DecodeAttention, PrefillAttention) read such
// entries; no kernel writes through one.
template <typename T>
struct PagedKv {
  T* pool = nullptr;                // (num_blocks, block_elements): KvLayout of every block
  const int32_t* indices = nullptr;  // (indptr[num_chunks]) flattened block tables
  const int32_t* indptr = nullptr;   // (num_chunks + 1)
  int64_t block_elements = 0;       // KvLayout::ElementsPerBlock()
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_tokens = 0;
  // kv_dtype fp8 (KvLayout kF8E4M3): `pool` holds blocks of block_bytes bytes, the E4M3 codes
  // at the element offsets above then one fp32 scale per row (kv_fp8.cuh); unset for 16-bit KV.
  bool fp8 = false;
  int64_t block_bytes = 0;
  const T* staged = nullptr;        // (slots, 2, num_kv_heads, block_tokens, head_dim)
};

#ifdef __CUDACC__
// First element of (layer, k, kv head 0) of table entry `entry` (a pool block, or a staged
// slot when negative).
template <typename T>
__device__ __forceinline__ const T* KvLayerBase(const PagedKv<T>& kv, int32_t entry, int32_t layer) {
  const int64_t layer_elements = 2 * static_cast<int64_t>(kv.num_kv_heads) * kv.block_tokens * kv.head_dim;
  if (entry < 0) return kv.staged + static_cast<int64_t>(-1 - entry) * layer_elements;
  return kv.pool + static_cast<int64_t>(entry) * kv.block_elements + layer * layer_elements;
}
#endif

// Per-token facts of one step: token t belongs to chunk chunk[t] at position pos[t].
struct StepTokens {
  const int32_t* chunk = nullptr;  // (num_tokens)
  const int32_t* pos = nullptr;    // (num_tokens)
  int32_t num_tokens = 0;
};

// One attention work unit (one CTA per item per kv head): query tokens
// [token_begin, token_begin + num_tokens) — consecutive positions of one chunk — and the
// query heads [group_begin, group_begin + group_count) of each kv head's group, against KV
// positions [kv_begin, kv_end) (split `split` of the tokens' context).
struct AttentionItem {
  int32_t chunk = 0;
  int32_t token_begin = 0;
  int32_t kv_begin = 0;
  int32_t kv_end = 0;
  int16_t num_tokens = 0;
  int16_t group_begin = 0;
  int16_t group_count = 0;
  int16_t split = 0;
};

// Where split-K partial results go. Token t with num_splits[t] > 1 owns partial slots
// partial_base[t] .. + num_splits[t]; others are written to the output directly.
struct AttentionSplits {
  const int32_t* num_splits = nullptr;    // (num_tokens)
  const int32_t* partial_base = nullptr;  // (num_tokens)
  float* partial_out = nullptr;           // (slots, num_heads, head_dim) unnormalised
  float* partial_ml = nullptr;            // (slots, num_heads, 2): running max (log2), sum
};

// Rows of query heads handled by one attention CTA for a head_dim (see AttentionPlan).
int AttentionMaxRows(int head_dim);
// True when head_dim is supported by the attention kernels (even, <= 256, splits into
// lanes evenly).
bool AttentionSupportsHeadDim(int head_dim);

// residual[t, :] = float(table[ids[t], :]) * scale (Gemma's sqrt(hidden) normalizer, else 1).
// table: (vocab, dim); residual: (rows, dim).
template <typename T>
cudaError_t EmbeddingGather(const int32_t* ids, const T* table, int rows, int dim, float scale,
                            float* residual, cudaStream_t stream,
                            const CudaLaunchOptions& launch);

// For output row r (source row s = row_map ? row_map[r] : r): when `add` is given,
// residual[s, :] += float(add[s, :]) (written back); then
// out[r, :] = T(residual[s, :] * rsqrt(mean(residual[s]^2) + eps) * weight).
template <typename T>
cudaError_t AddRmsNorm(float* residual, const T* add, const float* weight,
                       const int32_t* row_map, int rows, int dim, float eps, T* out,
                       cudaStream_t stream, const CudaLaunchOptions& launch);

// Weights a latency-bound kernel of a decode step asks L2 to fetch as it starts (its CTAs
// sharing the stretch), so that the projection after it reads them from L2 instead of waiting
// on HBM (CudaLaunchOptions::l2_prefetch). Null base: nothing.
struct L2Prefetch {
  const void* base = nullptr;
  int64_t bytes = 0;  // a multiple of 16; base 16-byte aligned
};
// Whether `prefetch` is null, or aligned with each of `ctas` shares under 4 GiB.
bool L2PrefetchValid(const L2Prefetch& prefetch, int64_t ctas);
// The parts of CudaLaunchOptions::l2_prefetch, and the library's choice of them (both:
// bench/results/2026-12-07-l2-prefetch).
inline constexpr int kL2PrefetchO = 1;        // the o projection's, during QkvPost
inline constexpr int kL2PrefetchNextQkv = 2;  // the next layer's qkv, during an MoE layer's router
inline constexpr int kL2PrefetchByDefault = kL2PrefetchO | kL2PrefetchNextQkv;
// The parts a decode step of `rows` rows takes: none past two rows (the projections are then no
// GEMVs, and the attention's KV stream keeps HBM busy).
inline int L2PrefetchParts(const CudaLaunchOptions& launch, int rows) {
  if (rows > 2) return 0;
  return launch.l2_prefetch < 0 ? kL2PrefetchByDefault : launch.l2_prefetch;
}

// Post-processing of the fused QKV projection qkv: (rows, (num_heads + 2*num_kv_heads) *
// head_dim), per token: + bias (f32, optional), per-head RMSNorm of q and k with
// q_norm / k_norm (f32 (head_dim), optional, Qwen3), RoPE (rotate_half, angle
// pos[t] * inv_freq[i]) on q and k; q goes to q_out (rows, num_heads, head_dim) and k, v
// are stored at their positions in layer `layer` of the paged pool.
template <typename T>
struct QkvPostParams {
  const T* qkv = nullptr;
  const float* bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* inv_freq = nullptr;  // (head_dim / 2)
  // LongRoPE (Phi-3's long variants, config.h): positions from long_from_position on rotate
  // with long_inv_freq instead, and every position's cos/sin are scaled by rope_scale.
  const float* long_inv_freq = nullptr;  // (head_dim / 2) or null
  int32_t long_from_position = 0;
  float rope_scale = 1.0f;
  float norm_eps = 1e-6f;
  int32_t num_heads = 0;
  int32_t layer = 0;
  T* q_out = nullptr;
  // The o projection's weights, fetched into L2 while this kernel and the attention run.
  L2Prefetch prefetch;
};
template <typename T>
cudaError_t QkvPost(const QkvPostParams<T>& params, StepTokens tokens, PagedKv<T> kv,
                    cudaStream_t stream, const CudaLaunchOptions& launch);

// How one layer's attention scores are formed (model/config.h): s = scale * q.k (scale 0:
// 1/sqrt(head_dim)); then s = logit_softcap * tanh(s / logit_softcap) where logit_softcap > 0
// (Gemma 2); a query at position p reads keys in (p - window, p] where window > 0 (a
// sliding-window layer), else every key up to p.
struct AttentionScores {
  float scale = 0.0f;
  float logit_softcap = 0.0f;
  int32_t window = 0;
};

// Causal attention of every step token over its chunk's paged KV (positions <= its own),
// GQA, scores as `scores` says, softmax in fp32. q: (tokens, num_heads, head_dim);
// out: (tokens, num_heads, head_dim). Runs `num_items` items, then merges split-K
// partials. `max_splits` bounds num_splits of any token (sizes the merge).
template <typename T>
struct AttentionParams {
  const T* q = nullptr;
  T* out = nullptr;
  const AttentionItem* items = nullptr;
  int32_t num_items = 0;
  int32_t num_heads = 0;
  int32_t layer = 0;
  int32_t max_rows = 0;     // largest num_tokens * group_count over the items
  bool any_split = false;   // some token has num_splits > 1: run the merge pass
  AttentionScores scores;
};
template <typename T>
cudaError_t PagedAttention(const AttentionParams<T>& params, StepTokens tokens, PagedKv<T> kv,
                           AttentionSplits splits, cudaStream_t stream);

// out[t, i] = act(gate_up[t, i]) * gate_up[t, dim + i] (act: SiLU or GELU-tanh).
// gate_up: (rows, 2*dim); out: (rows, dim).
template <typename T>
cudaError_t GatedMul(const T* gate_up, int rows, int dim, GateActivation act, T* out, cudaStream_t stream,
                     const CudaLaunchOptions& launch);

// ids[r] = argmax_j logits[r, j] (lowest index on ties; NaN never wins).  logits:
// (rows, vocab) f32, 16-byte aligned; scratch: ArgmaxScratchBytes(rows) of device memory
// (per-slice partial results).
constexpr int kArgmaxSplits = 32;
size_t ArgmaxScratchBytes(int rows);
cudaError_t ArgmaxRows(const float* logits, int rows, int vocab, void* scratch, int32_t* ids,
                       cudaStream_t stream, const CudaLaunchOptions& launch);

// One sample's parameters as SampleRows reads them (kvtier::RowSampling's fields).
struct SampleParams {
  float temperature = 0.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  int32_t logits_row = -1;   // the logits row it reads; -1: its own index
  double u = 0.0;            // the draw in [0, 1)
  float min_p = 0.0f;        // 0 = off
  int32_t reserved = 0;
};
// ids[r] = the token kvtier::SampleRow (backend/row_sampling.h) picks with params[r] from
// logits row params[r].logits_row (row r when -1), up to rounding at the cut and draw
// boundaries (sampling.cu). logits: (logits rows, vocab) f32; params and ids (rows of
// them) in device memory.
cudaError_t SampleRows(const float* logits, int rows, int vocab, const SampleParams* params,
                       int32_t* ids, cudaStream_t stream, const CudaLaunchOptions& launch);

// Grammar masks (backend/token_masks.h): logits[r, t] = -inf where bit t % 32 of word t / 32
// of mask slots[r] is clear; rows with slots[r] < 0 are left alone. logits: (rows, vocab)
// f32; slots: (rows); masks: (slots, words) with words = ceil(vocab / 32); device memory.
cudaError_t ApplyTokenMasks(float* logits, int rows, int vocab, const int32_t* slots, const uint32_t* masks,
                            int words, cudaStream_t stream);

// Small-batch GEMM for decode: out(rows, n) = x(rows, k) * w(n, k)^T, fp32 accumulation,
// out T (or f32 when out_f32). Only when GemvSupported: 1 <= rows <= kGemvMaxRows,
// k % 8 == 0, x and w 16-byte aligned (rows of x and w then are too).
constexpr int kGemvMaxRows = 8;
bool GemvSupported(int rows, int k, const void* x, const void* w);
template <typename T>
cudaError_t GemvSmallRows(const T* x, const T* w, int rows, int k, int n, void* out,
                          bool out_f32, cudaStream_t stream, const CudaLaunchOptions& launch);
// out(rows, inter) = act(x * gate^T) * (x * up^T) for w_gate_up = [gate; up] of shape
// (2 * inter, k): the gate|up projection and GatedMul in one decode kernel, fp32 until the
// 16-bit output. 1 <= rows <= 2, otherwise as GemvSupported.
template <typename T>
cudaError_t GemvGatedMul(const T* x, const T* w_gate_up, int rows, int k, int inter, GateActivation act, T* out,
                         cudaStream_t stream, const CudaLaunchOptions& launch);

// out[r, :] = T(weight * x[r, :] * rsqrt(mean(x[r]^2) + eps)) of 16-bit rows x (rows, dim);
// out may be x. Gemma's post-attention and post-feed-forward norms.
template <typename T>
cudaError_t RmsNormRows(const T* x, const float* weight, int rows, int dim, float eps, T* out, cudaStream_t stream);

// logits[r, i] = tanh(logits[r, i] / cap) * cap (Gemma 2's final logit soft-cap), cap > 0.
// logits: (rows, vocab) f32.
cudaError_t SoftCapRows(float* logits, int rows, int vocab, float cap, cudaStream_t stream);

// Conversions and fills used for weights and tests.
template <typename T>
cudaError_t ConvertFromF32(const float* in, int64_t count, T* out, cudaStream_t stream);
template <typename T>
cudaError_t ConvertToF32(const T* in, int64_t count, float* out, cudaStream_t stream);
// out[i] = offset + scale * u(i), u uniform in [-1, 1) from a hash of (seed, i); T is bf16,
// f16 or float.
template <typename T>
cudaError_t FillRandom(T* out, int64_t count, uint64_t seed, float offset, float scale,
                       cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_KERNELS_H_
