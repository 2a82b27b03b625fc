// Typed reads of config.json fields, shared by the config parsers (config.cc,
// config_families.cc). Internal to src/model. Stateless; thread-safe.
#ifndef KVTIER_MODEL_CONFIG_JSON_H_
#define KVTIER_MODEL_CONFIG_JSON_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "nlohmann/json.hpp"

namespace kvtier::config_json {

using Json = nlohmann::json;

// A field that is absent or null reads as nullopt; a value of another type is
// InvalidArgument naming the field.
absl::StatusOr<std::optional<int64_t>> OptionalInt(const Json& obj, const char* field);
absl::StatusOr<std::optional<double>> OptionalDouble(const Json& obj, const char* field);
absl::StatusOr<std::optional<bool>> OptionalBool(const Json& obj, const char* field);
// InvalidArgument when absent or not positive.
absl::StatusOr<int64_t> RequiredPositiveInt(const Json& obj, const char* field);

// The rope type of a rope_scaling / rope_parameters dict ("rope_type", legacy "type"),
// "default" when neither is given.
absl::StatusOr<std::string> RopeType(const Json& dict, const char* field);

// rope_scaling (legacy) or rope_parameters (transformers v5) dict: "default"/absent means
// plain RoPE; "llama3" is parsed; anything else is Unimplemented.
absl::StatusOr<std::optional<Llama3RopeScaling>> ParseRopeDict(const Json& dict, const char* field);

// The rope_scaling dict of llama3 scaling, as config.json holds it.
nlohmann::ordered_json Llama3RopeScalingJson(const Llama3RopeScaling& scaling);

}  // namespace kvtier::config_json

#endif  // KVTIER_MODEL_CONFIG_JSON_H_
