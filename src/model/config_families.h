// The config.json fields of the Gemma 2/3 and Phi-3 families (and, by way of config_moe.h,
// the MoE ones): reading them into a ModelConfig and writing them back. Internal to
// src/model (config.cc). Stateless; thread-safe.
#ifndef KVTIER_MODEL_CONFIG_FAMILIES_H_
#define KVTIER_MODEL_CONFIG_FAMILIES_H_

#include "absl/status/status.h"
#include "model/config.h"
#include "nlohmann/json.hpp"

namespace kvtier {

// Fills the family fields of *config (architecture and the common fields already parsed)
// with transformers' defaults for absent keys, among them which layers slide in
// sliding_window (Gemma, Phi-3, Mistral, Mixtral, and Qwen with use_sliding_window);
// Mixtral's and Qwen3-MoE's experts through ParseMoeFields (config_moe.h). Nothing to do
// for Llama.
// InvalidArgument naming a malformed field; Unimplemented naming a feature kvtier does not
// run (an activation other than silu / gelu_pytorch_tanh, a rope type, partial rotary).
absl::Status ParseFamilyFields(const nlohmann::json& obj, ModelConfig* config);

// Adds the family's keys (and rope_scaling) to a config.json being written, as
// transformers' config classes name them.
void AddFamilyFieldsToJson(const ModelConfig& config, nlohmann::ordered_json* json);

}  // namespace kvtier

#endif  // KVTIER_MODEL_CONFIG_FAMILIES_H_
