// The Hopper (sm_90a) prefill attention kernel behind PrefillAttention's PrefillKernel::kWgmma
// (prefill_attention.h): bf16 queries, bf16 or fp8 KV, head_dim 128. Built for sm_90a alone,
// like the skinny projection; PrefillAttention calls it only where PrefillWgmmaSupported.
#ifndef KVTIER_BACKEND_CUDA_PREFILL_ATTENTION_WGMMA_H_
#define KVTIER_BACKEND_CUDA_PREFILL_ATTENTION_WGMMA_H_

#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_attention.h"

namespace kvtier::cuda {

// The tiles hold at most PrefillTileTokens(128, group, kWgmma) tokens; bt_shift = log2 of the
// pool's block_tokens. `variant` picks the KV tile, the pipeline depth and whether the next
// tile's S overlaps this tile's softmax (0: the default; the others are for the kernel's tests
// and timing sweep: 1 kv64 x2, 2 kv64 x3, 3 kv128 x3; overlapped: 4 kv128 x3, 5 kv64 x3,
// 6 kv64 x4; fp8 KV runs 4-6 as 0; 7 kv64 x2 at 128 registers a thread, two CTAs per SM).
// params.scores other than plain (a scale, Gemma 2's soft-cap, a sliding window) run on each
// variant's second instance, which applies them as the mma.sync kernel does and skips the KV
// tiles before every row's window.
cudaError_t PrefillAttentionWgmma(const PrefillAttentionParams<bf16>& params, const PagedKv<bf16>& kv, int bt_shift,
                                  cudaStream_t stream, int variant = 0);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_PREFILL_ATTENTION_WGMMA_H_
