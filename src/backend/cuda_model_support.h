// Which model features the CUDA forward runs: the check both the backend factory and the
// CUDA backend make before anything is loaded, so a model it cannot run is refused by name
// instead of computed wrongly. Stateless; thread-safe.
#ifndef KVTIER_BACKEND_CUDA_MODEL_SUPPORT_H_
#define KVTIER_BACKEND_CUDA_MODEL_SUPPORT_H_

#include "absl/status/status.h"
#include "backend/backend.h"
#include "model/config.h"

namespace kvtier {

// OK, or Unimplemented naming the architecture and the feature the CUDA forward lacks, and
// that the CPU backend runs it. The dense families run: Llama, Mistral, Qwen2/3, Phi-3 (fused
// projections, LongRoPE) and Gemma 2/3 (GeGLU, (1 + w) and sandwich norms, scaled embeddings,
// query_pre_attn_scalar, soft-caps, two RoPE bases, sliding windows at any sequence length);
// the mixture-of-experts families (Mixtral, Qwen3-MoE) at the shapes the expert kernels take
// (backend/cuda/moe_layer.h): up to 256 experts and top 16, hidden and expert sizes in
// multiples of 16.
absl::Status CudaForwardSupports(const ModelConfig& config);

// Scores other than plain (query_pre_attn_scalar, Gemma 2's soft-cap, sliding windows) on the
// Hopper wgmma prefill attention (backend/cuda/prefill_attention_wgmma.h) where the
// environment sets kCudaWgmmaScoresUnverifiedEnv to 1; without it KernelSelection keeps such
// models on the mma.sync prefill, which applies the same scores. The wgmma instances are
// written but not yet checked on a GPU; the switch is for their tests and the device call that
// checks them (docs/CUDA_BACKEND.md).
inline constexpr char kCudaWgmmaScoresUnverifiedEnv[] = "KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED";
// Whether kCudaWgmmaScoresUnverifiedEnv is "1"; read here only.
bool CudaWgmmaScoresUnverifiedEnabled();

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_MODEL_SUPPORT_H_
