// KernelSelection (see kernel_selection.h).
#include "backend/cuda/kernel_selection.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/skinny_tma_map.h"

namespace kvtier::cuda {
bool PlainAttentionScores(const ModelConfig& config) {
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const AttentionScores s = AttentionScoresOf(config, layer);
    if (s.scale > 0.0f || s.logit_softcap > 0.0f || s.window > 0) return false;
  }
  return true;
}

AttentionScores AttentionScoresOf(const ModelConfig& config, int64_t layer) {
  AttentionScores s;
  if (config.query_pre_attn_scalar && *config.query_pre_attn_scalar != static_cast<double>(config.head_dim)) {
    s.scale = static_cast<float>(config.AttentionScale());
  }
  if (config.attn_logit_softcap) s.logit_softcap = static_cast<float>(*config.attn_logit_softcap);
  if (const std::optional<int64_t> window = config.LayerWindow(layer)) {
    s.window = static_cast<int32_t>(std::min<int64_t>(*window, std::numeric_limits<int32_t>::max()));
  }
  return s;
}

absl::StatusOr<KernelSelection> KernelSelection::For(const ModelConfig& config, const KvLayout& layout,
                                                     const CudaOptions& options, DType compute_dtype) {
  KernelSelection k;
  cudaDeviceProp props{};
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, 0));
  k.sm_count = props.multiProcessorCount;
  k.skinny_mode = SkinnyGemmDeviceOk(0) && compute_dtype == DType::kBF16 ? options.skinny_gemm : 0;
  k.skinny_tma = k.skinny_mode != 0 && SkinnyTmaAvailable();
  if (k.skinny_mode == 3 && !k.skinny_tma) k.skinny_mode = 1;  // a driver without tensor maps
  const int32_t heads = static_cast<int32_t>(config.num_heads);
  const int32_t kv_heads = static_cast<int32_t>(config.num_kv_heads);
  const int32_t head_dim = static_cast<int32_t>(config.head_dim);
  k.fast_attention = DecodeAttentionSupported(head_dim, heads, kv_heads) &&
                     PrefillAttentionSupported(head_dim, heads, kv_heads) && layout.block_tokens >= 8 &&
                     layout.block_tokens <= 64 && (layout.block_tokens & (layout.block_tokens - 1)) == 0 &&
                     options.fast_attention;
  if (layout.dtype == DType::kF8E4M3 && !k.fast_attention) {
    return absl::UnimplementedError(
        absl::StrCat("cuda backend: kv_dtype fp8 needs the fast attention kernels (head_dim 64 or 128, at most 8 query "
                     "heads per kv head, "
                     "block_tokens a power of two in [8, 64], fast attention on); this model has head_dim ",
                     head_dim, ", ", heads, " heads, ", kv_heads, " kv heads, block_tokens ", layout.block_tokens));
  }
  // Other scores run on the wgmma kernel's kScores instances, 1.05-1.15x the mma.sync kernel
  // with bf16 KV and 1.5-1.8x with fp8 KV on a Gemma-scored layer (H200,
  // bench/results/2026-12-05-h200-cudnn-forms).
  if (k.fast_attention && options.prefill_wgmma && SkinnyGemmDeviceOk(0) &&
      PrefillWgmmaSupported(compute_dtype == DType::kBF16, head_dim, heads, kv_heads)) {
    k.prefill_kernel = PrefillKernel::kWgmma;
  }
  k.prefill_tile_tokens = PrefillTileTokens(head_dim, heads / kv_heads, k.prefill_kernel);
  if (options.prefill_cudnn != CudnnPrefillUse::kNever) {
    if (!k.fast_attention) {
      k.prefill_cudnn_refusal = "cuDNN attention needs the fast attention kernels' shapes";
    } else if (compute_dtype != DType::kBF16) {
      k.prefill_cudnn_refusal = "cuDNN attention runs bf16 compute only";
    } else if (!PlainAttentionScores(config)) {
      k.prefill_cudnn_refusal = "cuDNN attention forms plain scores only (no sliding window, soft-cap or other scale)";
    } else if (!CudnnAttention::SupportsHeadDim(head_dim) || (head_dim != 64 && head_dim != 128)) {
      k.prefill_cudnn_refusal = absl::StrCat("cuDNN attention does not take head_dim ", head_dim);
    } else {
      k.prefill_cudnn = true;
    }
  }
  if (k.fast_attention) {
    const bool fp8_kv = layout.dtype == DType::kF8E4M3;
    const int32_t pair_tiles = options.launch.decode_fp8_pair_tiles;
    const int32_t per_sm = compute_dtype == DType::kBF16
                               ? DecodeResidentCtasPerSm<bf16>(head_dim, fp8_kv, layout.block_tokens, pair_tiles)
                               : DecodeResidentCtasPerSm<f16>(head_dim, fp8_kv, layout.block_tokens, pair_tiles);
    k.decode_wave_ctas = k.sm_count * per_sm;
  }
  return k;
}

}  // namespace kvtier::cuda
