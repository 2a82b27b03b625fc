// Decode attention: one query token per sequence against its whole paged context, GQA,
// split-K over the context with an in-kernel choice of splits. Every launch dimension
// depends only on host constants (rows, max_splits, heads), never on context lengths, so
// a decode step can be captured once in a CUDA graph and replayed with new positions and
// block tables in device memory.
#ifndef KVTIER_BACKEND_CUDA_DECODE_ATTENTION_H_
#define KVTIER_BACKEND_CUDA_DECODE_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

template <typename T>
struct DecodeAttentionParams {
  const T* q = nullptr;          // (step tokens, num_heads, head_dim)
  T* out = nullptr;              // (step tokens, num_heads, head_dim)
  const int32_t* rows = nullptr;  // (num_rows) step token index of each decode query
  int32_t num_rows = 0;          // decode queries; fixed per captured graph
  int32_t num_heads = 0;
  int32_t layer = 0;
  int32_t max_splits = 1;        // upper bound of splits per row (grid size)
  float* partial_out = nullptr;  // DecodePartialFloats(num_rows, max_splits, ...) floats
  float* partial_ml = nullptr;   // DecodePartialMlFloats(num_rows, max_splits, ...) floats
  // DecodeCounterInts(num_rows, num_kv_heads) counters, zeroed ONCE when allocated
  // (cudaMemset); the last split CTA of each (row, kv head) merges the partials and resets
  // its counter, so every launch leaves them zero again (graph replays need nothing).
  // Partials and counters may be shared by launches that run in order on one stream.
  // Unused (may be null) when max_splits == 1.
  uint32_t* split_counters = nullptr;
  // fp8 KV with bf16 compute: 1 applies the K/V row scales to the scores and probabilities
  // (codes reach the tensor cores exact), 0 dequantizes every code first, -1 the library's
  // choice (decode_attention.cu kFp8ScalesAfterProducts). For tests and benchmarks.
  int32_t fp8_scales_after_products = -1;
  // fp8 KV with the scales after the products, head_dim 128 and a power-of-two block of at
  // least 16 positions: 1 reads KV in rounds of 32 positions with 16-byte code loads
  // (decode_fp8_pair_tile.cuh), 2 the same with the products in f16 (one conversion per code
  // pair; Q and P at power-of-two and running-maximum scales), 0 in 16-position tiles with
  // 8-byte loads, -1 the library's choice (decode_attention.cu kFp8PairTiles). Ignored where
  // the shape does not allow it.
  int32_t fp8_pair_tiles = -1;
  AttentionScores scores;  // scale, soft-cap and sliding window (kernels.h)
};

// Row token t = rows[i] attends to KV positions [0, tokens.pos[t]] of chunk tokens.chunk[t]
// (its own K/V already written; within a sliding window only the last `window` of them),
// scores as params.scores says, softmax in fp32. Grid
// (num_rows, num_kv_heads, max_splits); one kernel, no host-side planning.
// Launched with programmatic dependent launch (pdl.h): rows, tokens.pos, tokens.chunk,
// kv.indptr and kv.indices are read BEFORE PdlWait, so the kernel launched right before this
// one must not write them (host copies and kernels further back are fine); q, the KV pool,
// partials and counters are read after it.
template <typename T>
cudaError_t DecodeAttention(const DecodeAttentionParams<T>& params, StepTokens tokens,
                            PagedKv<T> kv, cudaStream_t stream,
                            const CudaLaunchOptions& launch);

// CTAs of the instance DecodeAttention runs for this shape (compute type T, head_dim, fp8
// KV, block_tokens, DecodeAttentionParams::fp8_pair_tiles) resident on one SM at once, from
// the runtime's occupancy calculator (the instances differ in registers: 2 or 3 on sm_90);
// 1 when it cannot tell.
template <typename T>
int32_t DecodeResidentCtasPerSm(int32_t head_dim, bool fp8_kv, int32_t block_tokens, int32_t fp8_pair_tiles);
// Host heuristic: splits per row so that rows * kv heads * splits fills one wave of
// `wave_ctas` resident CTAs (SMs x DecodeResidentCtasPerSm).
int32_t DecodeMaxSplits(int32_t num_rows, int32_t num_kv_heads, int32_t wave_ctas);
// Sizes of the partial buffers for (num_rows, max_splits).
size_t DecodePartialFloats(int32_t num_rows, int32_t max_splits, int32_t num_heads,
                           int32_t head_dim);
size_t DecodePartialMlFloats(int32_t num_rows, int32_t max_splits, int32_t num_heads);
size_t DecodeCounterInts(int32_t num_rows, int32_t num_kv_heads);
// Largest max_splits DecodeAttention accepts.
constexpr int32_t kDecodeMaxSplitsLimit = 128;
// Largest max_splits DecodeMaxSplits answers.
constexpr int32_t kDecodeMaxSplitsCap = 64;
// Most query heads per kv head the kernel takes (the MMA's N of P.V).
constexpr int32_t kDecodeMaxGroup = 8;
// head_dim / GQA shapes the kernel supports.
bool DecodeAttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_DECODE_ATTENTION_H_
