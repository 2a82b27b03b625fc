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


}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_MODEL_SUPPORT_H_
