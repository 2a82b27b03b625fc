// The model features as JSON (config_features.h). Stateless; thread-safe.
#include "model/config_features.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace kvtier {

void AddModelFeaturesJson(const ModelConfig& c, nlohmann::ordered_json* json) {
  nlohmann::ordered_json& j = *json;
  auto optional = [](const std::optional<double>& v) { return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(); };
  if (!c.sliding_layers.empty()) {
    std::vector<int64_t> windowed;
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      if (c.LayerWindow(layer)) windowed.push_back(layer);
    }
    j["sliding_window"] = c.sliding_window ? nlohmann::ordered_json(*c.sliding_window) : nlohmann::ordered_json();
    j["sliding_window_layers"] = windowed;
  }
  if (c.activation == Activation::kGeluTanh) j["activation"] = "gelu_pytorch_tanh";
  if (c.attn_logit_softcap || c.final_logit_softcap) {
    j["attn_logit_softcapping"] = optional(c.attn_logit_softcap);
    j["final_logit_softcapping"] = optional(c.final_logit_softcap);
  }
  if (c.query_pre_attn_scalar) j["query_pre_attn_scalar"] = *c.query_pre_attn_scalar;
  if (c.gemma3_rope.local_theta) j["rope_local_theta"] = *c.gemma3_rope.local_theta;
  if (c.gemma3_rope.linear_factor != 1.0) j["rope_linear_factor"] = c.gemma3_rope.linear_factor;
  if (c.long_rope) {
    j["longrope"] = {{"original_max_position_embeddings", c.long_rope->original_max_position_embeddings},
                     {"attention_factor", c.long_rope->attention_factor}};
  }
  if (c.fused_projections) j["fused_projections"] = true;
  if (c.moe.num_experts > 0) {
    std::vector<int64_t> sparse;
    // A token's forward skips every expert but its top k: their gate, up and down.
    int64_t skipped = 0;
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      if (!c.IsMoeLayer(layer)) continue;
      sparse.push_back(layer);
      skipped += (c.moe.num_experts - c.moe.top_k) * 3 * c.hidden_size * c.moe.expert_intermediate_size;
    }
    j["experts"] = {{"count", c.moe.num_experts},
                    {"per_token", c.moe.top_k},
                    {"intermediate_size", c.moe.expert_intermediate_size},
                    {"norm_topk_prob", c.moe.norm_topk_prob},
                    {"layers", sparse},
                    {"active_parameters", c.NumParameters() - skipped}};
  }
}

}  // namespace kvtier
