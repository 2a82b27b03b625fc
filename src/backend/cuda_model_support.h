// Which model features the CUDA forward runs: the check both the backend factory and the
// CUDA backend make before anything is loaded, so a model it cannot run is refused by name
// instead of computed wrongly. Stateless; thread-safe.
#ifndef KVTIER_BACKEND_CUDA_MODEL_SUPPORT_H_
#define KVTIER_BACKEND_CUDA_MODEL_SUPPORT_H_

#include <optional>

#include "absl/status/status.h"
#include "backend/backend.h"
#include "model/config.h"

namespace kvtier {

// OK, or Unimplemented naming the architecture and the first feature the CUDA forward lacks
// (mixture-of-experts layers, soft-capping, GeGLU, (1 + w) and sandwich norms, scaled
// embeddings, a query_pre_attn_scalar, Gemma 3's local RoPE base and linear RoPE scaling),
// and that the CPU backend runs it. Phi-3's fused projections and LongRoPE run.
absl::Status CudaForwardSupports(const ModelConfig& config);

// The CUDA forward attends over every position: exact for sliding-window layers while a
// sequence is within the smallest window, so it runs such a model up to that window.
std::optional<PositionLimit> CudaPositionLimit(const ModelConfig& config);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_MODEL_SUPPORT_H_
