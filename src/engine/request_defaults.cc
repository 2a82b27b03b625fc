// RequestDefaults (request_defaults.h). Stateless functions; thread-safe.
#include "engine/request_defaults.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backend/sampling_ranges.h"

namespace kvtier {
namespace {

// The float as the double its shortest decimal form reads as (0.6f shows as 0.6, not as
// 0.60000002384185791).
double FloatAsShortestDouble(float value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

absl::Status FieldError(const absl::Status& range) {
  return absl::InvalidArgumentError(absl::StrCat("generation_config.json: field ", range.message()));
}

absl::Status OutOfRange(const char* field, const char* range, double value) {
  return absl::InvalidArgumentError(
      absl::StrCat("generation_config.json: field ", field, " must be ", range, ", got ", value));
}

}  // namespace

absl::StatusOr<RequestDefaults> RequestDefaultsFrom(const GenerationConfig& config) {
  RequestDefaults d;
  auto from_file = [&](const char* field) { d.from_generation_config.push_back(field); };
  const bool sample = config.do_sample.value_or(false);
  if (config.do_sample.has_value()) from_file("do_sample");
  if (config.temperature.has_value()) {
    const float t = static_cast<float>(*config.temperature);
    if (absl::Status s = ValidateTemperature(t); !s.ok()) return FieldError(s);
    if (sample) {
      d.temperature = t;
      from_file("temperature");
    }
  } else if (sample) {
    d.temperature = 1.0f;
  }
  if (config.top_k.has_value()) {
    if (*config.top_k < 0 || *config.top_k > std::numeric_limits<int32_t>::max()) {
      return OutOfRange("top_k", ">= 0", static_cast<double>(*config.top_k));
    }
    d.top_k = static_cast<int32_t>(*config.top_k);
    from_file("top_k");
  } else if (sample) {
    d.top_k = 50;
  }
  if (config.top_p.has_value()) {
    const float p = static_cast<float>(*config.top_p);
    if (absl::Status s = ValidateTopP(p); !s.ok()) return FieldError(s);
    d.top_p = p;
    from_file("top_p");
  }
  if (config.repetition_penalty.has_value()) {
    const double r = *config.repetition_penalty;
    if (!(r > 0.0) || !std::isfinite(r)) return OutOfRange("repetition_penalty", "finite and > 0", r);
    d.repetition_penalty = static_cast<float>(r);
    from_file("repetition_penalty");
  }
  if (config.max_new_tokens.has_value()) {
    const int64_t n = *config.max_new_tokens;
    if (n < 1 || n > std::numeric_limits<int32_t>::max()) return OutOfRange("max_new_tokens", ">= 1", static_cast<double>(n));
    d.max_new_tokens = static_cast<int32_t>(n);
    from_file("max_new_tokens");
  }
  if (!config.eos_token_ids.empty()) from_file("eos_token_id");
  return d;
}

SamplingParams ApplyRequestDefaults(const RequestDefaults& defaults, const ExplicitSamplingFields& set,
                                    SamplingParams params) {
  if (!set.temperature) params.temperature = defaults.temperature;
  if (!set.top_k) params.top_k = defaults.top_k;
  if (!set.top_p) params.top_p = defaults.top_p;
  if (!set.repetition_penalty) params.repetition_penalty = defaults.repetition_penalty;
  if (!set.max_new_tokens) params.max_new_tokens = defaults.max_new_tokens;
  return params;
}

nlohmann::ordered_json RequestDefaultsJson(const RequestDefaults& defaults, const GenerationConfig& config) {
  nlohmann::ordered_json j;
  j["do_sample"] = !(defaults.temperature == 0.0f || defaults.top_k == 1);
  j["temperature"] = FloatAsShortestDouble(defaults.temperature);
  j["top_k"] = defaults.top_k;
  j["top_p"] = FloatAsShortestDouble(defaults.top_p);
  j["repetition_penalty"] = FloatAsShortestDouble(defaults.repetition_penalty);
  j["max_new_tokens"] = defaults.max_new_tokens;
  j["eos_token_ids"] = config.eos_token_ids;
  j["from_generation_config"] = defaults.from_generation_config;
  return j;
}

}  // namespace kvtier
