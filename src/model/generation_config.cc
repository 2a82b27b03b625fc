// ParseGenerationConfig (generation_config.h). Stateless; thread-safe.
#include "model/generation_config.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

using Json = nlohmann::json;

absl::Status WrongType(const char* field, const char* what, const Json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("field '", field, "' must be ", what, ", got ", value.dump()));
}

// Absent or null: nullopt.
const Json* FindField(const Json& obj, const char* field) {
  auto it = obj.find(field);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

absl::Status ReadBool(const Json& obj, const char* field, std::optional<bool>* out) {
  const Json* v = FindField(obj, field);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return WrongType(field, "true or false", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadNumber(const Json& obj, const char* field, std::optional<double>* out) {
  const Json* v = FindField(obj, field);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return WrongType(field, "a number", *v);
  *out = v->get<double>();
  return absl::OkStatus();
}

// Integers, and floats with an integral value (some writers emit 50.0).
absl::StatusOr<int64_t> AsInteger(const Json& v, const char* field) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e18) return static_cast<int64_t>(d);
  }
  return WrongType(field, "an integer", v);
}

absl::Status ReadInteger(const Json& obj, const char* field, std::optional<int64_t>* out) {
  const Json* v = FindField(obj, field);
  if (v == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(*out, AsInteger(*v, field));
  return absl::OkStatus();
}

absl::Status ReadEosIds(const Json& obj, std::vector<int32_t>* out) {
  const Json* v = FindField(obj, "eos_token_id");
  if (v == nullptr) return absl::OkStatus();
  std::vector<Json> ids = v->is_array() ? v->get<std::vector<Json>>() : std::vector<Json>{*v};
  for (const Json& id : ids) {
    if (!id.is_number()) return WrongType("eos_token_id", "an integer or a list of integers", *v);
    ASSIGN_OR_RETURN(int64_t value, AsInteger(id, "eos_token_id"));
    if (value < 0 || value > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("field 'eos_token_id' holds ", value, ", not a token id"));
    }
    out->push_back(static_cast<int32_t>(value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationConfig> ParseGenerationConfig(std::string_view json_text) {
  const Json obj = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!obj.is_object()) return absl::InvalidArgumentError("must hold a JSON object");
  GenerationConfig config;
  RETURN_IF_ERROR(ReadBool(obj, "do_sample", &config.do_sample));
  RETURN_IF_ERROR(ReadNumber(obj, "temperature", &config.temperature));
  RETURN_IF_ERROR(ReadInteger(obj, "top_k", &config.top_k));
  RETURN_IF_ERROR(ReadNumber(obj, "top_p", &config.top_p));
  RETURN_IF_ERROR(ReadNumber(obj, "repetition_penalty", &config.repetition_penalty));
  RETURN_IF_ERROR(ReadInteger(obj, "max_new_tokens", &config.max_new_tokens));
  RETURN_IF_ERROR(ReadEosIds(obj, &config.eos_token_ids));
  return config;
}

}  // namespace kvtier
