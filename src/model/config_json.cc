// Typed reads of config.json fields (config_json.h). Stateless; thread-safe.
#include "model/config_json.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::config_json {

absl::StatusOr<std::optional<int64_t>> OptionalInt(const Json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>();
  if (it->is_number_integer()) return std::optional<int64_t>(it->get<int64_t>());
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (std::floor(v) == v && std::fabs(v) < 9e18) return std::optional<int64_t>(static_cast<int64_t>(v));
  }
  return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be an integer, got ", it->dump()));
}

absl::StatusOr<std::optional<double>> OptionalDouble(const Json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<double>();
  if (it->is_number()) return std::optional<double>(it->get<double>());
  return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be a number, got ", it->dump()));
}

absl::StatusOr<std::optional<bool>> OptionalBool(const Json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (it->is_boolean()) return std::optional<bool>(it->get<bool>());
  return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be a boolean, got ", it->dump()));
}

absl::StatusOr<int64_t> RequiredPositiveInt(const Json& obj, const char* field) {
  ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInt(obj, field));
  if (!value) return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' is missing"));
  if (*value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be positive, got ", *value));
  }
  return *value;
}

absl::StatusOr<std::string> RopeType(const Json& dict, const char* field) {
  for (const char* key : {"rope_type", "type"}) {
    auto it = dict.find(key);
    if (it != dict.end() && !it->is_null()) {
      if (!it->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("config field '", field, ".", key, "' must be a string"));
      }
      return it->get<std::string>();
    }
  }
  return std::string("default");
}

absl::StatusOr<std::optional<Llama3RopeScaling>> ParseRopeDict(const Json& dict, const char* field) {
  if (dict.is_null()) return std::optional<Llama3RopeScaling>();
  if (!dict.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be an object or null"));
  }
  ASSIGN_OR_RETURN(std::string type, RopeType(dict, field));
  if (type == "default") return std::optional<Llama3RopeScaling>();
  if (type != "llama3") {
    return absl::UnimplementedError(
        absl::StrCat("unsupported rope scaling type '", type, "' in '", field, "' (only llama3 is supported)"));
  }
  Llama3RopeScaling s;
  ASSIGN_OR_RETURN(std::optional<double> factor, OptionalDouble(dict, "factor"));
  ASSIGN_OR_RETURN(std::optional<double> low, OptionalDouble(dict, "low_freq_factor"));
  ASSIGN_OR_RETURN(std::optional<double> high, OptionalDouble(dict, "high_freq_factor"));
  ASSIGN_OR_RETURN(std::optional<int64_t> orig, OptionalInt(dict, "original_max_position_embeddings"));
  if (!factor) return absl::InvalidArgumentError(absl::StrCat("config field '", field, ".factor' is missing"));
  s.factor = *factor;
  if (low) s.low_freq_factor = *low;
  if (high) s.high_freq_factor = *high;
  if (orig) s.original_max_position_embeddings = *orig;
  if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
      s.original_max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid llama3 rope scaling in '", field, "': factor ", s.factor, ", low_freq_factor ",
        s.low_freq_factor, ", high_freq_factor ", s.high_freq_factor,
        ", original_max_position_embeddings ", s.original_max_position_embeddings,
        " (need factor > 0, 0 < low < high, original > 0)"));
  }
  return std::optional<Llama3RopeScaling>(s);
}

nlohmann::ordered_json Llama3RopeScalingJson(const Llama3RopeScaling& s) {
  nlohmann::ordered_json scaling;
  scaling["rope_type"] = "llama3";
  scaling["factor"] = s.factor;
  scaling["low_freq_factor"] = s.low_freq_factor;
  scaling["high_freq_factor"] = s.high_freq_factor;
  scaling["original_max_position_embeddings"] = s.original_max_position_embeddings;
  return scaling;
}

}  // namespace kvtier::config_json
