// The features a model has beyond the Llama shape — which layers attend in a sliding window,
// soft-caps, the attention scale, Gemma 3's local RoPE base, LongRoPE, fused weights,
// experts — as JSON, for `kvtier inspect` and kvt_model_info_json. Stateless; thread-safe.
#ifndef KVTIER_MODEL_CONFIG_FEATURES_H_
#define KVTIER_MODEL_CONFIG_FEATURES_H_

#include "model/config.h"
#include "nlohmann/json.hpp"

namespace kvtier {

// Adds to *json only the keys of the features this model has: "sliding_window" and
// "sliding_window_layers", "activation" (when not silu), "attn_logit_softcapping" /
// "final_logit_softcapping", "query_pre_attn_scalar", "rope_local_theta",
// "rope_linear_factor", "longrope", "fused_projections", and "experts" (count, per_token,
// intermediate_size, norm_topk_prob, the layers with experts, and active_parameters: the
// parameters of one token's forward through its top-k experts, embeddings counted whole as
// model cards count them — Mixtral-8x7B's 12.9 B of 46.7 B).
void AddModelFeaturesJson(const ModelConfig& config, nlohmann::ordered_json* json);

}  // namespace kvtier

#endif  // KVTIER_MODEL_CONFIG_FEATURES_H_
