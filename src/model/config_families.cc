// Gemma 2/3 and Phi-3 config.json fields, and the MoE families through config_moe.h
// (config_families.h). Stateless; thread-safe.
#include "model/config_families.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/config_json.h"
#include "model/config_moe.h"

namespace kvtier {
namespace {

using Json = nlohmann::json;
using config_json::OptionalDouble;
using config_json::OptionalInt;

absl::StatusOr<Activation> ParseActivation(const Json& obj, const char* fallback) {
  std::string name = fallback;
  // Gemma's MLP reads hidden_activation; hidden_act is the older key.
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("config field '", key, "' must be a string, got ", it->dump()));
    }
    name = it->get<std::string>();
    break;
  }
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new") return Activation::kGeluTanh;
  return absl::UnimplementedError(
      absl::StrCat("unsupported activation '", name, "' (kvtier runs silu and gelu_pytorch_tanh)"));
}

// A positive number; absent reads as `fallback`, null as none.
absl::StatusOr<std::optional<double>> PositiveOrNull(const Json& obj, const char* field,
                                                     std::optional<double> fallback) {
  if (!obj.contains(field)) return fallback;
  ASSIGN_OR_RETURN(std::optional<double> value, OptionalDouble(obj, field));
  if (value && !(*value > 0 && std::isfinite(*value))) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be positive or null, got ", *value));
  }
  return value;
}

// layer_types when given, else default_sliding(layer); cleared when there is no window.
absl::Status ParseLayerTypes(const Json& obj, bool (*default_sliding)(int64_t, int64_t), int64_t pattern,
                             ModelConfig* c) {
  c->sliding_layers.assign(static_cast<size_t>(c->num_layers), false);
  auto it = obj.find("layer_types");
  if (it != obj.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int64_t>(it->size()) != c->num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("config field 'layer_types' must list num_hidden_layers (",
                                                     c->num_layers, ") layer types, got ", it->dump()));
    }
    for (int64_t i = 0; i < c->num_layers; ++i) {
      const Json& type = (*it)[static_cast<size_t>(i)];
      if (type == "sliding_attention") {
        c->sliding_layers[static_cast<size_t>(i)] = true;
      } else if (type != "full_attention") {
        return absl::InvalidArgumentError(absl::StrCat("config field 'layer_types' entry ", i, " is ", type.dump(),
                                                       " (expected \"sliding_attention\" or \"full_attention\")"));
      }
    }
  } else {
    for (int64_t i = 0; i < c->num_layers; ++i) c->sliding_layers[static_cast<size_t>(i)] = default_sliding(i, pattern);
  }
  if (!c->sliding_window) c->sliding_layers.clear();
  return absl::OkStatus();
}

// transformers' defaults: Gemma 2 alternates sliding and full from layer 0; Gemma 3 makes
// every pattern-th layer full.
bool AlternateSliding(int64_t layer, int64_t /*pattern*/) { return (layer + 1) % 2 != 0; }
bool PatternSliding(int64_t layer, int64_t pattern) { return (layer + 1) % pattern != 0; }

// A Gemma 3 rope dict of the full-attention layers: default, linear or llama3 scaling, and
// its rope_theta when it has one.
absl::Status ParseGemma3GlobalRope(const Json& dict, const std::string& field, ModelConfig* c) {
  if (dict.is_null()) return absl::OkStatus();
  if (!dict.is_object()) return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' must be an object"));
  ASSIGN_OR_RETURN(std::optional<double> theta, OptionalDouble(dict, "rope_theta"));
  if (theta) c->rope_theta = *theta;
  ASSIGN_OR_RETURN(std::string type, config_json::RopeType(dict, field.c_str()));
  if (type == "linear") {
    ASSIGN_OR_RETURN(std::optional<double> factor, OptionalDouble(dict, "factor"));
    if (!factor || !(*factor > 0) || !std::isfinite(*factor)) {
      return absl::InvalidArgumentError(absl::StrCat("config field '", field, ".factor' must be a positive number"));
    }
    c->gemma3_rope.linear_factor = *factor;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(c->rope_scaling, config_json::ParseRopeDict(dict, field.c_str()));
  return absl::OkStatus();
}

// Gemma 3's RoPE: legacy rope_scaling, or v5 rope_parameters, flat or per layer type
// ({"full_attention": {...}, "sliding_attention": {...}}).
absl::Status ParseGemma3Rope(const Json& obj, ModelConfig* c) {
  auto scaling = obj.find("rope_scaling");
  if (scaling != obj.end()) RETURN_IF_ERROR(ParseGemma3GlobalRope(*scaling, "rope_scaling", c));
  auto params = obj.find("rope_parameters");
  if (params == obj.end() || params->is_null()) return absl::OkStatus();
  if (!params->is_object()) return absl::InvalidArgumentError("config field 'rope_parameters' must be an object");
  if (!params->contains("full_attention") && !params->contains("sliding_attention")) {
    return ParseGemma3GlobalRope(*params, "rope_parameters", c);
  }
  if (params->contains("full_attention")) {
    RETURN_IF_ERROR(ParseGemma3GlobalRope((*params)["full_attention"], "rope_parameters.full_attention", c));
  }
  auto local = params->find("sliding_attention");
  if (local != params->end() && !local->is_null()) {
    const std::string field = "rope_parameters.sliding_attention";
    ASSIGN_OR_RETURN(std::string type, config_json::RopeType(*local, field.c_str()));
    if (type != "default") {
      return absl::UnimplementedError(absl::StrCat("rope scaling '", type, "' in '", field, "' is not supported"));
    }
    ASSIGN_OR_RETURN(std::optional<double> theta, OptionalDouble(*local, "rope_theta"));
    if (theta) c->gemma3_rope.local_theta = *theta;
  }
  return absl::OkStatus();
}

absl::Status ParseGemma(const Json& obj, ModelConfig* c) {
  const bool gemma2 = c->architecture == Architecture::kGemma2;
  ASSIGN_OR_RETURN(c->activation, ParseActivation(obj, "gelu_pytorch_tanh"));
  c->gemma.norm_plus_one = true;
  c->gemma.sandwich_norms = true;
  c->gemma.scale_embeddings = true;
  ASSIGN_OR_RETURN(c->query_pre_attn_scalar, PositiveOrNull(obj, "query_pre_attn_scalar", 256.0));
  ASSIGN_OR_RETURN(c->attn_logit_softcap,
                   PositiveOrNull(obj, "attn_logit_softcapping", gemma2 ? std::optional<double>(50.0) : std::nullopt));
  ASSIGN_OR_RETURN(c->final_logit_softcap,
                   PositiveOrNull(obj, "final_logit_softcapping", gemma2 ? std::optional<double>(30.0) : std::nullopt));
  if (!obj.contains("sliding_window")) c->sliding_window = 4096;  // both configs' default
  if (gemma2) return ParseLayerTypes(obj, AlternateSliding, 2, c);

  ASSIGN_OR_RETURN(std::optional<int64_t> pattern, OptionalInt(obj, "sliding_window_pattern"));
  if (pattern && *pattern <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("config field 'sliding_window_pattern' must be positive, got ", *pattern));
  }
  RETURN_IF_ERROR(ParseLayerTypes(obj, PatternSliding, pattern.value_or(6), c));
  ASSIGN_OR_RETURN(std::optional<double> local_theta, OptionalDouble(obj, "rope_local_base_freq"));
  c->gemma3_rope.local_theta = local_theta.value_or(10000.0);
  RETURN_IF_ERROR(ParseGemma3Rope(obj, c));
  if (!(*c->gemma3_rope.local_theta > 0) || !std::isfinite(*c->gemma3_rope.local_theta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'rope_local_base_freq' must be positive, got ", *c->gemma3_rope.local_theta));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> RopeFactors(const Json& dict, const char* key, int64_t count) {
  auto it = dict.find(key);
  const std::string bad = absl::StrCat("longrope '", key, "' must be a list of ", count, " positive numbers (head_dim / 2)");
  if (it == dict.end() || !it->is_array() || static_cast<int64_t>(it->size()) != count) {
    return absl::InvalidArgumentError(bad);
  }
  std::vector<double> factors;
  for (const Json& v : *it) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      return absl::InvalidArgumentError(bad);
    }
    factors.push_back(v.get<double>());
  }
  return factors;
}

// rope_scaling (or v5 rope_parameters) of Phi-3: default, or longrope / su.
absl::Status ParsePhi3Rope(const Json& obj, ModelConfig* c) {
  const Json* dict = nullptr;
  const char* field = "rope_scaling";
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = obj.find(key);
    if (it != obj.end() && !it->is_null()) {
      if (!it->is_object()) return absl::InvalidArgumentError(absl::StrCat("config field '", key, "' must be an object"));
      dict = &*it;
      field = key;
      break;
    }
  }
  if (dict == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::optional<double> theta, OptionalDouble(*dict, "rope_theta"));
  if (theta) c->rope_theta = *theta;
  ASSIGN_OR_RETURN(std::string type, config_json::RopeType(*dict, field));
  if (type == "default") return absl::OkStatus();
  if (type != "longrope" && type != "su") {
    return absl::UnimplementedError(absl::StrCat("unsupported rope scaling type '", type, "' in '", field,
                                                 "' for Phi-3 (longrope is supported)"));
  }
  LongRopeScaling s;
  ASSIGN_OR_RETURN(s.short_factor, RopeFactors(*dict, "short_factor", c->head_dim / 2));
  ASSIGN_OR_RETURN(s.long_factor, RopeFactors(*dict, "long_factor", c->head_dim / 2));
  // Phi3Config carries original_max_position_embeddings at the top level (default 4096).
  ASSIGN_OR_RETURN(std::optional<int64_t> top, OptionalInt(obj, "original_max_position_embeddings"));
  ASSIGN_OR_RETURN(std::optional<int64_t> inner, OptionalInt(*dict, "original_max_position_embeddings"));
  s.original_max_position_embeddings = top.value_or(inner.value_or(4096));
  if (s.original_max_position_embeddings <= 1) {
    return absl::InvalidArgumentError(absl::StrCat("config field 'original_max_position_embeddings' must be > 1, got ",
                                                   s.original_max_position_embeddings));
  }
  ASSIGN_OR_RETURN(std::optional<double> attention_factor, OptionalDouble(*dict, "attention_factor"));
  const double factor = static_cast<double>(c->max_position_embeddings) /
                        static_cast<double>(s.original_max_position_embeddings);
  s.attention_factor =
      attention_factor.value_or(factor <= 1.0 ? 1.0
                                              : std::sqrt(1.0 + std::log(factor) /
                                                                    std::log(static_cast<double>(
                                                                        s.original_max_position_embeddings))));
  c->long_rope = std::move(s);
  return absl::OkStatus();
}

// Mistral and Mixtral slide every layer in their window; a Qwen model with
// use_sliding_window slides the layers from max_window_layers on (transformers' defaults when
// the config lists no layer_types).
bool EverySliding(int64_t /*layer*/, int64_t /*first*/) { return true; }
bool SlidingFrom(int64_t layer, int64_t first) { return layer >= first; }

absl::Status ParseWindowLayers(const Json& obj, ModelConfig* c) {
  switch (c->architecture) {
    case Architecture::kMistral:
      if (!obj.contains("sliding_window")) c->sliding_window = 4096;  // MistralConfig's default
      return ParseLayerTypes(obj, EverySliding, 0, c);
    case Architecture::kMixtral:
      return ParseLayerTypes(obj, EverySliding, 0, c);
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe: {
      ASSIGN_OR_RETURN(std::optional<int64_t> first, OptionalInt(obj, "max_window_layers"));
      if (first && *first < 0) {
        return absl::InvalidArgumentError(absl::StrCat("config field 'max_window_layers' must be >= 0, got ", *first));
      }
      return ParseLayerTypes(obj, SlidingFrom, first.value_or(28), c);  // Qwen configs' default
    }
    default:
      return absl::OkStatus();
  }
}

absl::Status ParsePhi3(const Json& obj, ModelConfig* c) {
  ASSIGN_OR_RETURN(c->activation, ParseActivation(obj, "silu"));
  c->fused_projections = true;
  ASSIGN_OR_RETURN(std::optional<double> partial, OptionalDouble(obj, "partial_rotary_factor"));
  if (partial && *partial != 1.0) {
    return absl::UnimplementedError(
        absl::StrCat("partial_rotary_factor ", *partial, " is not supported (RoPE over the whole head only)"));
  }
  RETURN_IF_ERROR(ParsePhi3Rope(obj, c));
  if (c->sliding_window) c->sliding_layers.assign(static_cast<size_t>(c->num_layers), true);
  return absl::OkStatus();
}

// The Gemma 3 sliding_window_pattern that reproduces sliding_layers, if one does.
std::optional<int64_t> SlidingPattern(const ModelConfig& c) {
  for (int64_t pattern = 1; pattern <= c.num_layers + 1; ++pattern) {
    bool matches = true;
    for (int64_t i = 0; i < c.num_layers && matches; ++i) {
      matches = c.sliding_layers[static_cast<size_t>(i)] == PatternSliding(i, pattern);
    }
    if (matches) return pattern;
  }
  return std::nullopt;
}

nlohmann::ordered_json OptionalNumber(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

// An integer where the value is whole: transformers types query_pre_attn_scalar as int and
// refuses 24.0 for it.
nlohmann::ordered_json OptionalWholeNumber(const std::optional<double>& v) {
  if (v && *v == std::floor(*v) && std::fabs(*v) < 9.0e15) return nlohmann::ordered_json(static_cast<int64_t>(*v));
  return OptionalNumber(v);
}

}  // namespace

absl::Status ParseFamilyFields(const nlohmann::json& obj, ModelConfig* config) {
  switch (config->architecture) {
    case Architecture::kGemma2:
    case Architecture::kGemma3:
      return ParseGemma(obj, config);
    case Architecture::kPhi3:
      return ParsePhi3(obj, config);
    case Architecture::kMixtral:
    case Architecture::kQwen3Moe:
      RETURN_IF_ERROR(ParseWindowLayers(obj, config));
      return ParseMoeFields(obj, config);
    case Architecture::kMistral:
    case Architecture::kQwen2:
    case Architecture::kQwen3:
      return ParseWindowLayers(obj, config);
    case Architecture::kLlama:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

void AddFamilyFieldsToJson(const ModelConfig& c, nlohmann::ordered_json* json) {
  nlohmann::ordered_json& j = *json;
  j["sliding_window"] = c.sliding_window ? nlohmann::ordered_json(*c.sliding_window) : nlohmann::ordered_json();
  if (c.architecture == Architecture::kPhi3) {
    j["original_max_position_embeddings"] =
        c.long_rope ? c.long_rope->original_max_position_embeddings : c.max_position_embeddings;
    if (c.long_rope) {
      // Exactly these three keys: older Phi3Config validation refuses any other.
      j["rope_scaling"] = {{"type", "longrope"},
                           {"short_factor", c.long_rope->short_factor},
                           {"long_factor", c.long_rope->long_factor}};
    } else {
      j["rope_scaling"] = nullptr;
    }
    j["pad_token_id"] = nullptr;  // Phi3Config's default 32000 may lie outside the vocabulary
    return;
  }
  j["hidden_activation"] = c.activation == Activation::kGeluTanh ? "gelu_pytorch_tanh" : "silu";
  j["query_pre_attn_scalar"] = OptionalWholeNumber(c.query_pre_attn_scalar);
  j["attn_logit_softcapping"] = OptionalNumber(c.attn_logit_softcap);
  j["final_logit_softcapping"] = OptionalNumber(c.final_logit_softcap);
  j["attention_bias"] = c.attention_bias;
  if (c.gemma3_rope.linear_factor != 1.0) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.gemma3_rope.linear_factor}};
  } else {
    j["rope_scaling"] = c.rope_scaling ? config_json::Llama3RopeScalingJson(*c.rope_scaling) : nlohmann::ordered_json();
  }
  if (!c.sliding_layers.empty()) {
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (bool sliding : c.sliding_layers) types.push_back(sliding ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  if (c.architecture == Architecture::kGemma3) {
    j["rope_local_base_freq"] = c.gemma3_rope.local_theta.value_or(10000.0);
    if (!c.sliding_layers.empty()) {
      if (std::optional<int64_t> pattern = SlidingPattern(c)) j["sliding_window_pattern"] = *pattern;
    }
  }
  j["cache_implementation"] = "hybrid";
  j["pad_token_id"] = 0;
}

}  // namespace kvtier
