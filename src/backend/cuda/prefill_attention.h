// Prefill attention on the tensor cores: causal attention of a chunk's query tokens over
// its paged KV (prefix hits and earlier chunks included), FlashAttention style (online
// softmax in fp32). Two kernels: kMma (mma.sync, bf16 or fp16, head_dim 64 or 128, any
// GPU this backend runs on) and kWgmma (Hopper warpgroup MMA, bf16 with head_dim 128,
// compute capability 9.0; prefill_attention_wgmma.cu). One CTA = one tile (a run of
// consecutive query tokens of one chunk x all query heads of one kv head's group).
#ifndef KVTIER_BACKEND_CUDA_PREFILL_ATTENTION_H_
#define KVTIER_BACKEND_CUDA_PREFILL_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>
#if __cplusplus >= 202002L
#include <span>
#endif

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

// Step tokens [token_begin, token_begin + num_tokens) of chunk `chunk`, consecutive
// positions starting at first_pos; they attend to KV positions [0, first_pos + i].
struct PrefillTile {
  int32_t chunk = 0;
  int32_t token_begin = 0;
  int32_t num_tokens = 0;
  int32_t first_pos = 0;
};

struct PrefillChunk {
  int32_t chunk = 0;        // index in the step
  int32_t token_begin = 0;  // step token index of its first token
  int32_t num_tokens = 0;
  int64_t start_position = 0;
};

enum class PrefillKernel : int32_t { kMma = 0, kWgmma = 1 };

// Query rows (tokens x group heads) of one CTA of each kernel.
inline constexpr int32_t kPrefillTileRows = 64;
inline constexpr int32_t kPrefillWgmmaTileRows = 128;

// Query tokens per tile for a GQA group size (rows = tokens * group fill the CTA): the
// kernel's rows / group, 0 when the group does not fit. Every tile passed to
// PrefillAttention must hold at most this many tokens of the kernel it runs on.
int32_t PrefillTileTokens(int32_t head_dim, int32_t group, PrefillKernel kernel = PrefillKernel::kMma);

// The shape kWgmma takes: bf16 compute, head_dim 128, group <= 128 (bf16 or fp8 KV). The
// device must also be compute capability 9.0 (SkinnyGemmDeviceOk: the same sm_90a code).
bool PrefillWgmmaSupported(bool bf16_compute, int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);
#if __cplusplus >= 202002L  // the .cu files are compiled as C++17 (no std::span)
// Appends the tiles of `chunks` (host, pure); longest-running tiles first.
void PlanPrefillTiles(std::span<const PrefillChunk> chunks, int32_t tile_tokens,
                      std::vector<PrefillTile>* tiles);
#endif

template <typename T>
struct PrefillAttentionParams {
  const T* q = nullptr;  // (step tokens, num_heads, head_dim)
  T* out = nullptr;      // (step tokens, num_heads, head_dim)
  const PrefillTile* tiles = nullptr;  // device
  int32_t num_tiles = 0;
  int32_t num_heads = 0;
  int32_t layer = 0;
  PrefillKernel kernel = PrefillKernel::kMma;  // the tiles were planned for this kernel
  int32_t wgmma_variant = 0;  // kWgmma: PrefillAttentionWgmma's variant
  // Scale, soft-cap and sliding window (kernels.h), on both kernels.
  AttentionScores scores;
};
template <typename T>
cudaError_t PrefillAttention(const PrefillAttentionParams<T>& params, PagedKv<T> kv,
                             cudaStream_t stream);
bool PrefillAttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_PREFILL_ATTENTION_H_
