// The CUDA forward's model features (cuda_model_support.h). Stateless; thread-safe.
#include "backend/cuda_model_support.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status CudaForwardSupports(const ModelConfig& c) {
  const char* missing = nullptr;
  if (c.moe.num_experts > 0) {
    missing = "mixture-of-experts layers (router and experts)";
  } else if (c.attn_logit_softcap || c.final_logit_softcap) {
    missing = "logit soft-capping";
  } else if (c.activation != Activation::kSilu) {
    missing = "the GELU-tanh (GeGLU) MLP";
  } else if (c.gemma.norm_plus_one || c.gemma.sandwich_norms) {
    missing = "Gemma's (1 + w) and pre/post feed-forward RMSNorms";
  } else if (c.gemma.scale_embeddings) {
    missing = "scaled embeddings";
  } else if (c.query_pre_attn_scalar) {
    missing = "query_pre_attn_scalar";
  } else if (c.gemma3_rope.local_theta) {
    missing = "a separate RoPE base for local layers";
  } else if (c.gemma3_rope.linear_factor != 1.0) {
    missing = "linear RoPE scaling";
  }
  if (missing == nullptr) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("cuda backend: ", std::string(ArchitectureName(c.architecture)),
                                               " needs ", missing,
                                               ", which the CUDA forward does not run yet; use --backend cpu"));
}

std::optional<PositionLimit> CudaPositionLimit(const ModelConfig& c) {
  std::optional<int64_t> window;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (std::optional<int64_t> w = c.LayerWindow(layer); w && (!window || *w < *window)) window = w;
  }
  // A position p attends to p + 1 keys: within a window of w while p < w.
  if (!window || *window >= c.max_position_embeddings) return std::nullopt;
  return PositionLimit{*window, absl::StrCat("the cuda backend runs ", std::string(ArchitectureName(c.architecture)),
                                             "'s sliding-window attention (window ", *window,
                                             ") only within its window; use --backend cpu for longer sequences")};
}

}  // namespace kvtier
