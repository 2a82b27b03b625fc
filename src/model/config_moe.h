// The config.json fields of the mixture-of-experts families (Mixtral, Qwen3-MoE): reading
// them into ModelConfig::moe and writing them back. Internal to src/model (config.cc,
// config_families.cc). Stateless; thread-safe.
#ifndef KVTIER_MODEL_CONFIG_MOE_H_
#define KVTIER_MODEL_CONFIG_MOE_H_

#include "absl/status/status.h"
#include "model/config.h"
#include "nlohmann/json.hpp"

namespace kvtier {

// Fills config->moe (num_layers and intermediate_size already parsed) with transformers'
// defaults for absent keys. InvalidArgument naming a malformed or inconsistent field
// (num_experts_per_tok above the expert count, an mlp_only_layers entry outside the
// layers); Unimplemented for an activation other than silu.
absl::Status ParseMoeFields(const nlohmann::json& obj, ModelConfig* config);

// Adds the expert keys to a config.json being written, as MixtralConfig and
// Qwen3MoeConfig name them.
void AddMoeFieldsToJson(const ModelConfig& config, nlohmann::ordered_json* json);

}  // namespace kvtier

#endif  // KVTIER_MODEL_CONFIG_MOE_H_
