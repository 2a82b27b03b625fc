// ModelConfig parsing/serialisation for the Llama family (config.h). Stateless functions;
// thread-safe.
#include "model/config.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/config_families.h"
#include "model/config_json.h"
#include "model/config_moe.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

using Json = nlohmann::json;
using config_json::OptionalBool;
using config_json::OptionalDouble;
using config_json::OptionalInt;
using config_json::ParseRopeDict;
using config_json::RequiredPositiveInt;

struct ArchInfo {
  Architecture arch;
  const char* class_name;
  const char* model_type;
  int64_t default_max_positions;  // HF config class default
};

constexpr ArchInfo kArchs[] = {
    {Architecture::kLlama, "LlamaForCausalLM", "llama", 2048},
    {Architecture::kMistral, "MistralForCausalLM", "mistral", 4096 * 32},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2", 32768},
    {Architecture::kQwen3, "Qwen3ForCausalLM", "qwen3", 32768},
    {Architecture::kGemma2, "Gemma2ForCausalLM", "gemma2", 8192},
    {Architecture::kGemma3, "Gemma3ForCausalLM", "gemma3_text", 131072},
    {Architecture::kPhi3, "Phi3ForCausalLM", "phi3", 4096},
    {Architecture::kMixtral, "MixtralForCausalLM", "mixtral", 4096 * 32},
    {Architecture::kQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe", 32768},
};

bool IsGemma(Architecture arch) { return arch == Architecture::kGemma2 || arch == Architecture::kGemma3; }
bool IsFamily(Architecture arch) { return IsGemma(arch) || arch == Architecture::kPhi3; }
bool IsQwen(Architecture arch) {
  return arch == Architecture::kQwen2 || arch == Architecture::kQwen3 || arch == Architecture::kQwen3Moe;
}

const ArchInfo& Info(Architecture arch) {
  for (const ArchInfo& info : kArchs) {
    if (info.arch == arch) return info;
  }
  return kArchs[0];
}

absl::StatusOr<Architecture> ParseArchitecture(const Json& obj) {
  std::string name;
  auto archs = obj.find("architectures");
  if (archs != obj.end() && !archs->is_null()) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field 'architectures' must be a non-empty list of strings, got ", archs->dump()));
    }
    name = (*archs)[0].get<std::string>();
    for (const ArchInfo& info : kArchs) {
      if (name == info.class_name) return info.arch;
    }
    return absl::UnimplementedError(absl::StrCat(
        "unsupported architecture '", name,
        "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
        "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM)"));
  }
  auto type = obj.find("model_type");
  if (type == obj.end() || !type->is_string()) {
    return absl::InvalidArgumentError("config has neither 'architectures' nor 'model_type'");
  }
  name = type->get<std::string>();
  for (const ArchInfo& info : kArchs) {
    if (name == info.model_type) return info.arch;
  }
  return absl::UnimplementedError(absl::StrCat("unsupported model_type '", name, "'"));
}

absl::Status ParseTokenIds(const Json& obj, ModelConfig* config) {
  std::vector<int64_t> eos;
  auto it = obj.find("eos_token_id");
  if (it != obj.end() && !it->is_null()) {
    const std::string bad =
        absl::StrCat("config field 'eos_token_id' must be an integer or a list of integers, got ", it->dump());
    if (it->is_number_integer()) {
      eos.push_back(it->get<int64_t>());
    } else if (it->is_array()) {
      for (const Json& id : *it) {
        if (!id.is_number_integer()) return absl::InvalidArgumentError(bad);
        eos.push_back(id.get<int64_t>());
      }
    } else {
      return absl::InvalidArgumentError(bad);
    }
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> bos, OptionalInt(obj, "bos_token_id"));
  std::vector<int64_t> all = eos;
  if (bos) all.push_back(*bos);
  for (int64_t id : all) {
    if (id < 0 || id >= config->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("special token id ", id,
                                                     " (bos_token_id/eos_token_id) is outside the vocabulary [0, ",
                                                     config->vocab_size, ")"));
    }
  }
  config->bos_token_id.reset();
  if (bos) config->bos_token_id = static_cast<int32_t>(*bos);
  config->eos_token_ids.assign(eos.begin(), eos.end());
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseObject(const Json& obj) {
  if (!obj.is_object()) return absl::InvalidArgumentError("config.json is not a JSON object");
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, ParseArchitecture(obj));
  ASSIGN_OR_RETURN(c.hidden_size, RequiredPositiveInt(obj, "hidden_size"));
  ASSIGN_OR_RETURN(c.num_layers, RequiredPositiveInt(obj, "num_hidden_layers"));
  ASSIGN_OR_RETURN(c.num_heads, RequiredPositiveInt(obj, "num_attention_heads"));
  ASSIGN_OR_RETURN(c.intermediate_size, RequiredPositiveInt(obj, "intermediate_size"));
  ASSIGN_OR_RETURN(c.vocab_size, RequiredPositiveInt(obj, "vocab_size"));

  ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads, OptionalInt(obj, "num_key_value_heads"));
  c.num_kv_heads = kv_heads.value_or(c.num_heads);
  if (c.num_kv_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'num_key_value_heads' must be positive, got ", c.num_kv_heads));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads (", c.num_heads,
                                                   ") must be a multiple of num_key_value_heads (", c.num_kv_heads, ")"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, OptionalInt(obj, "head_dim"));
  if (head_dim) {
    if (*head_dim <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("config field 'head_dim' must be positive, got ", *head_dim));
    }
    c.head_dim = *head_dim;
  } else if (IsGemma(c.architecture)) {
    c.head_dim = 256;  // Gemma2Config / Gemma3TextConfig default
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat("hidden_size (", c.hidden_size, ") is not divisible by num_attention_heads (",
                                                     c.num_heads, ") and no head_dim is given"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim must be even for RoPE, got ", c.head_dim));
  }

  ASSIGN_OR_RETURN(std::optional<int64_t> max_pos, OptionalInt(obj, "max_position_embeddings"));
  c.max_position_embeddings = max_pos.value_or(Info(c.architecture).default_max_positions);
  if (c.max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'max_position_embeddings' must be positive, got ", c.max_position_embeddings));
  }
  ASSIGN_OR_RETURN(std::optional<double> eps, OptionalDouble(obj, "rms_norm_eps"));
  c.rms_norm_eps = eps.value_or(1e-6);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps)) {
    return absl::InvalidArgumentError(absl::StrCat("config field 'rms_norm_eps' must be positive, got ", c.rms_norm_eps));
  }

  // RoPE: legacy rope_theta + rope_scaling, or v5 rope_parameters; either form may be present.
  ASSIGN_OR_RETURN(std::optional<double> theta, OptionalDouble(obj, "rope_theta"));
  const bool million_theta = c.architecture == Architecture::kGemma3 || c.architecture == Architecture::kMixtral;
  c.rope_theta = theta.value_or(million_theta ? 1e6 : 10000.0);  // the config classes' defaults
  // Phi-3's longrope and Gemma 3's per-layer-type rope_parameters: config_families.cc.
  const bool family_rope = c.architecture == Architecture::kPhi3 || c.architecture == Architecture::kGemma3;
  auto scaling = obj.find("rope_scaling");
  if (scaling != obj.end() && !family_rope) {
    ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeDict(*scaling, "rope_scaling"));
  }
  auto params = obj.find("rope_parameters");
  if (params != obj.end() && !params->is_null() && !family_rope) {
    ASSIGN_OR_RETURN(std::optional<Llama3RopeScaling> from_params, ParseRopeDict(*params, "rope_parameters"));
    if (from_params) c.rope_scaling = from_params;
    ASSIGN_OR_RETURN(std::optional<double> params_theta, OptionalDouble(*params, "rope_theta"));
    if (params_theta) c.rope_theta = *params_theta;
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("config field 'rope_theta' must be positive, got ", c.rope_theta));
  }

  ASSIGN_OR_RETURN(std::optional<bool> tie, OptionalBool(obj, "tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(IsGemma(c.architecture));  // HF's defaults
  ASSIGN_OR_RETURN(std::optional<bool> bias, OptionalBool(obj, "attention_bias"));
  switch (c.architecture) {
    case Architecture::kLlama:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
    case Architecture::kGemma2:
    case Architecture::kGemma3:
      c.attention_bias = bias.value_or(false);
      break;
    case Architecture::kPhi3:
    case Architecture::kMistral:
    case Architecture::kMixtral:
      c.attention_bias = false;  // MistralConfig has no bias option
      break;
    case Architecture::kQwen2:
      c.attention_bias = true;  // Qwen2 q/k/v always carry a bias
      break;
  }
  c.qk_norm = c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kQwen3Moe ||
              c.architecture == Architecture::kGemma3;

  ASSIGN_OR_RETURN(std::optional<int64_t> window, OptionalInt(obj, "sliding_window"));
  if (IsQwen(c.architecture)) {
    // Qwen configs carry a sliding_window that only applies when use_sliding_window is set.
    ASSIGN_OR_RETURN(std::optional<bool> use_window, OptionalBool(obj, "use_sliding_window"));
    if (!use_window.value_or(false)) window.reset();
  } else if (c.architecture == Architecture::kLlama) {
    window.reset();
  }
  if (window && *window <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("config field 'sliding_window' must be positive or null, got ", *window));
  }
  c.sliding_window = window;
  RETURN_IF_ERROR(ParseFamilyFields(obj, &c));

  for (const char* key : {"torch_dtype", "dtype"}) {
    auto it = obj.find(key);
    if (it != obj.end() && it->is_string()) {
      c.torch_dtype = it->get<std::string>();
      break;
    }
  }
  RETURN_IF_ERROR(ParseTokenIds(obj, &c));
  return c;
}

int64_t FirstSlidingLayer(const ModelConfig& c) {
  for (size_t i = 0; i < c.sliding_layers.size(); ++i) {
    if (c.sliding_layers[i]) return static_cast<int64_t>(i);
  }
  return c.num_layers;
}

// layer_types, where the sliding layers are not exactly those from `first` on (the
// default that Mistral's, Mixtral's and Qwen's config classes derive without it).
void AddLayerTypesUnlessSlidingFrom(const ModelConfig& c, int64_t first, nlohmann::ordered_json* out) {
  bool suffix = true;
  for (size_t i = 0; i < c.sliding_layers.size(); ++i) suffix = suffix && c.sliding_layers[i] == (static_cast<int64_t>(i) >= first);
  if (suffix || c.sliding_layers.empty()) return;
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (bool sliding : c.sliding_layers) types.push_back(sliding ? "sliding_attention" : "full_attention");
  (*out)["layer_types"] = types;
}

// rope_scaling and rope_parameters as the Llama-family configs write them.
void AddRopeJson(const ModelConfig& c, nlohmann::ordered_json* out) {
  nlohmann::ordered_json& j = *out;
  nlohmann::ordered_json params;
  if (c.rope_scaling) {
    j["rope_scaling"] = config_json::Llama3RopeScalingJson(*c.rope_scaling);
    params = j["rope_scaling"];
  } else {
    j["rope_scaling"] = nullptr;
    params["rope_type"] = "default";
  }
  params["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = params;
}

}  // namespace

std::string_view ArchitectureName(Architecture arch) { return Info(arch).class_name; }

std::optional<int64_t> ModelConfig::LayerWindow(int64_t layer) const {
  if (!sliding_window || layer < 0 || layer >= static_cast<int64_t>(sliding_layers.size()) ||
      !sliding_layers[static_cast<size_t>(layer)]) {
    return std::nullopt;
  }
  return sliding_window;
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  return layer >= 0 && layer < static_cast<int64_t>(moe.sparse_layers.size()) &&
         moe.sparse_layers[static_cast<size_t>(layer)];
}

double ModelConfig::AttentionScale() const {
  if (query_pre_attn_scalar) return std::pow(*query_pre_attn_scalar, -0.5);
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

double ModelConfig::LayerRopeTheta(int64_t layer) const {
  return gemma3_rope.local_theta && LayerWindow(layer) ? *gemma3_rope.local_theta : rope_theta;
}

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size;
  int64_t per_layer = (gemma.sandwich_norms ? 4 : 2) * h;          // RMSNorms
  per_layer += h * q_dim() + 2 * h * kv_dim() + q_dim() * h;  // q, k, v, o
  if (attention_bias) per_layer += q_dim() + 2 * kv_dim();
  if (attention_bias && architecture != Architecture::kQwen2 && architecture != Architecture::kPhi3) {
    per_layer += h;  // o_proj bias
  }
  if (qk_norm) per_layer += 2 * head_dim;
  int64_t total = num_layers * per_layer + vocab_size * h + h;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    // gate, up, down: each expert's and the router, or the dense MLP's
    total += IsMoeLayer(layer) ? moe.num_experts * (3 * h * moe.expert_intermediate_size + h)
                               : 3 * h * intermediate_size;
  }
  if (!tie_word_embeddings) total += vocab_size * h;
  return total;
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text) {
  Json obj = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return absl::InvalidArgumentError("config.json is not valid JSON");
  try {
    return ParseObject(obj);
  } catch (const std::exception& e) {  // nlohmann type errors on unexpected shapes
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", e.what()));
  }
}

std::string ModelConfigToJson(const ModelConfig& c) {
  const ArchInfo& info = Info(c.architecture);
  nlohmann::ordered_json j;
  j["architectures"] = {info.class_name};
  j["model_type"] = info.model_type;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = c.activation == Activation::kGeluTanh ? "gelu_pytorch_tanh" : "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = 0.02;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (IsFamily(c.architecture)) {
    // Legacy keys only: transformers reads them in every version, while the families'
    // rope_parameters forms differ (per layer type for Gemma 3).
    AddFamilyFieldsToJson(c, &j);
  } else {
    AddRopeJson(c, &j);
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  switch (c.architecture) {
    case Architecture::kLlama:
      j["attention_bias"] = c.attention_bias;
      j["mlp_bias"] = false;
      j["pretraining_tp"] = 1;
      break;
    case Architecture::kMistral:
    case Architecture::kMixtral:
      if (c.sliding_window) {
        j["sliding_window"] = *c.sliding_window;
      } else {
        j["sliding_window"] = nullptr;
      }
      AddLayerTypesUnlessSlidingFrom(c, 0, &j);
      break;
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
      if (c.architecture != Architecture::kQwen2) j["attention_bias"] = c.attention_bias;
      j["use_sliding_window"] = c.sliding_window.has_value();
      if (c.sliding_window) {
        j["sliding_window"] = *c.sliding_window;
      } else {
        j["sliding_window"] = nullptr;
      }
      j["max_window_layers"] = FirstSlidingLayer(c);
      AddLayerTypesUnlessSlidingFrom(c, FirstSlidingLayer(c), &j);
      break;
    case Architecture::kGemma2:
    case Architecture::kGemma3:
    case Architecture::kPhi3:
      break;  // AddFamilyFieldsToJson
  }
  if (c.moe.num_experts > 0) AddMoeFieldsToJson(c, &j);
  j["attention_dropout"] = 0.0;
  j["torch_dtype"] = c.torch_dtype.empty() ? "float32" : c.torch_dtype;
  j["dtype"] = j["torch_dtype"];
  if (c.bos_token_id) {
    j["bos_token_id"] = *c.bos_token_id;
  } else {
    j["bos_token_id"] = nullptr;
  }
  if (c.eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["vocab_size"] = c.vocab_size;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace kvtier
