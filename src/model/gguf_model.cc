// kvtier models in GGUF spelling (gguf_model.h). Stateless; thread-safe.
#include "model/gguf_model.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier {
namespace {

// HF per-layer suffix <-> llama.cpp per-block suffix.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
constexpr std::pair<std::string_view, std::string_view> kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// "<prefix><layer>.<suffix>" -> (layer, suffix).
std::optional<std::pair<int64_t, std::string_view>> SplitLayer(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 9) return std::nullopt;
  int64_t layer = 0;
  for (char c : name.substr(0, dot)) {
    if (c < '0' || c > '9') return std::nullopt;
    layer = layer * 10 + (c - '0');
  }
  return std::make_pair(layer, name.substr(dot + 1));
}

// An f32 as the shortest decimal that reads back to it (1e-05, not 9.99999974737875e-06):
// what the converter meant, so a config read back from GGUF compares equal.
double ShortestDouble(double value) {
  const float f = static_cast<float>(value);
  char text[32];
  auto [end, ec] = std::to_chars(text, text + sizeof(text), f);
  if (ec != std::errc()) return value;
  double out = value;
  std::from_chars(text, end, out);
  return out;
}

class Hyperparameters {
 public:
  Hyperparameters(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string Key(std::string_view key) const { return absl::StrCat(arch_, ".", std::string(key)); }

  const GgufValue* Find(std::string_view key) const { return file_.Find(Key(key)); }

  absl::StatusOr<std::optional<int64_t>> Int(std::string_view key) const {
    const GgufValue* v = Find(key);
    if (v == nullptr) return std::optional<int64_t>();
    if (v->is_array()) {
      return absl::UnimplementedError(absl::StrCat(file_.path(), ": ", Key(key),
                                                   " is per layer; kvtier runs models whose layers are alike"));
    }
    std::optional<int64_t> i = v->AsInt();
    if (!i.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": ", Key(key), " is ", v->Describe(),
                                                     ", not an integer"));
    }
    return i;
  }

  absl::StatusOr<int64_t> RequiredInt(std::string_view key) const {
    ASSIGN_OR_RETURN(std::optional<int64_t> i, Int(key));
    if (!i.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": metadata ", Key(key), " is missing"));
    }
    return *i;
  }

  absl::StatusOr<std::optional<double>> Real(std::string_view key) const {
    const GgufValue* v = Find(key);
    if (v == nullptr) return std::optional<double>();
    std::optional<double> r = v->AsReal();
    if (!r.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": ", Key(key), " is ", v->Describe(),
                                                     ", not a number"));
    }
    return std::optional<double>(v->element_type() == GgufValueType::kFloat32 ? ShortestDouble(*r) : *r);
  }

 private:
  const GgufFile& file_;
  std::string arch_;
};

// Llama 3 scaling whose factors equal `factors` (rope_freqs.weight), trying the parameters
// every Llama 3.x release uses around the factor the file's lowest frequency carries.
absl::StatusOr<Llama3RopeScaling> ScalingFromFactors(const GgufFile& file, const GgufTensorInfo& tensor,
                                                     const ModelConfig& c) {
  if (tensor.type->dtype != DType::kF32 || tensor.num_elements() != c.head_dim / 2) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": rope_freqs.weight must be F32 with head_dim / 2 = ",
                                                   c.head_dim / 2, " elements"));
  }
  std::vector<float> factors(static_cast<size_t>(c.head_dim / 2));
  std::memcpy(factors.data(), tensor.data, factors.size() * sizeof(float));
  Llama3RopeScaling s;
  s.factor = ShortestDouble(factors.back());
  Hyperparameters hp(file, std::string(GgufArchitectureName(c.architecture)));
  ASSIGN_OR_RETURN(std::optional<int64_t> original, hp.Int("rope.scaling.original_context_length"));
  if (original.has_value()) s.original_max_position_embeddings = *original;
  const std::vector<float> expected = Llama3RopeFactors(s, c.rope_theta, c.head_dim);
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!(std::fabs(factors[i] - expected[i]) <= 1e-4f * std::fabs(expected[i]))) {
      return absl::UnimplementedError(absl::StrCat(
          file.path(), ": rope_freqs.weight is not Llama 3 RoPE scaling (factor ", s.factor, ", low 1, high 4, original ",
          s.original_max_position_embeddings, "): element ", i, " is ", factors[i], ", expected ", expected[i]));
    }
  }
  return s;
}

}  // namespace

std::string_view GgufArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
    default:
      return "llama";
  }
}

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& file) {
  const GgufValue* arch_value = file.Find("general.architecture");
  if (arch_value == nullptr || arch_value->AsString() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": metadata general.architecture is missing"));
  }
  const std::string arch = *arch_value->AsString();
  ModelConfig c;
  if (arch == "llama") {
    c.architecture = Architecture::kLlama;
  } else if (arch == "qwen2") {
    c.architecture = Architecture::kQwen2;
  } else if (arch == "qwen3") {
    c.architecture = Architecture::kQwen3;
  } else if (arch == "qwen3moe" || arch == "qwen2moe") {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": GGUF architecture '", arch,
                                                 "' (mixture of experts) is not supported from GGUF; kvtier runs "
                                                 "Qwen3-MoE from its safetensors checkpoint"));
  } else {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": GGUF architecture '", arch,
                                                 "' is not supported (kvtier runs llama, qwen2 and qwen3)"));
  }
  Hyperparameters hp(file, arch);
  // llama.cpp writes Mixtral as "llama" with expert_count and stacked expert tensors.
  ASSIGN_OR_RETURN(std::optional<int64_t> experts, hp.Int("expert_count"));
  if (experts.value_or(0) > 0) {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": ", arch, ".expert_count is ", *experts,
                                                 ": mixture-of-experts GGUF files are not supported; kvtier runs "
                                                 "Mixtral from its safetensors checkpoint"));
  }
  ASSIGN_OR_RETURN(c.hidden_size, hp.RequiredInt("embedding_length"));
  ASSIGN_OR_RETURN(c.num_layers, hp.RequiredInt("block_count"));
  ASSIGN_OR_RETURN(c.num_heads, hp.RequiredInt("attention.head_count"));
  ASSIGN_OR_RETURN(c.intermediate_size, hp.RequiredInt("feed_forward_length"));
  ASSIGN_OR_RETURN(c.max_position_embeddings, hp.RequiredInt("context_length"));
  ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads, hp.Int("attention.head_count_kv"));
  c.num_kv_heads = kv_heads.value_or(c.num_heads);
  ASSIGN_OR_RETURN(std::optional<int64_t> key_length, hp.Int("attention.key_length"));
  ASSIGN_OR_RETURN(std::optional<int64_t> value_length, hp.Int("attention.value_length"));
  c.head_dim = key_length.value_or(c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  if (value_length.has_value() && *value_length != c.head_dim) {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": value heads of ", *value_length,
                                                 " and key heads of ", c.head_dim, " differ"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> rope_dims, hp.Int("rope.dimension_count"));
  if (rope_dims.has_value() && *rope_dims != c.head_dim) {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": RoPE over ", *rope_dims, " of ", c.head_dim,
                                                 " head dimensions (partial rotary) is not supported"));
  }
  ASSIGN_OR_RETURN(std::optional<double> eps, hp.Real("attention.layer_norm_rms_epsilon"));
  if (!eps.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": metadata ", arch, ".attention.layer_norm_rms_epsilon is missing"));
  }
  c.rms_norm_eps = *eps;
  ASSIGN_OR_RETURN(std::optional<double> theta, hp.Real("rope.freq_base"));
  c.rope_theta = theta.value_or(10000.0);
  if (const GgufValue* scaling = hp.Find("rope.scaling.type")) {
    const std::string* type = scaling->AsString();
    if (type == nullptr || *type != "none") {
      return absl::UnimplementedError(absl::StrCat(file.path(), ": RoPE scaling ", scaling->Describe(),
                                                   " is not supported (Llama 3 scaling comes as rope_freqs.weight)"));
    }
  }

  if (const GgufTensorInfo* embed = file.FindTensor("token_embd.weight"); embed != nullptr && embed->dims.size() == 2) {
    c.vocab_size = embed->dims[1];
    // A quantized embedding's model computes in bf16.
    const std::optional<DType> dtype = embed->type->dtype;
    c.torch_dtype = std::string(TorchDTypeName(dtype.value_or(DType::kBF16)).value_or("bfloat16"));
  } else if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens"); tokens != nullptr && tokens->is_array()) {
    c.vocab_size = static_cast<int64_t>(tokens->size());
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> vocab, hp.Int("vocab_size"));
  if (c.vocab_size == 0) c.vocab_size = vocab.value_or(0);
  c.tie_word_embeddings = file.FindTensor("output.weight") == nullptr;
  c.qk_norm = c.architecture == Architecture::kQwen3;
  c.attention_bias = c.architecture == Architecture::kQwen2 || file.FindTensor("blk.0.attn_q.bias") != nullptr;
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    const GgufValue* v = file.Find(key);
    std::optional<int64_t> id = v == nullptr ? std::nullopt : v->AsInt();
    if (!id.has_value() || *id < 0 || *id > INT32_MAX) continue;
    if (absl::StrContains(key, "bos")) {
      c.bos_token_id = static_cast<int32_t>(*id);
    } else {
      c.eos_token_ids.push_back(static_cast<int32_t>(*id));
    }
  }
  if (const GgufTensorInfo* factors = file.FindTensor("rope_freqs.weight")) {
    if (c.num_heads <= 0 || c.head_dim <= 1) {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": bad head count or size"));
    }
    ASSIGN_OR_RETURN(c.rope_scaling, ScalingFromFactors(file, *factors, c));
  }
  // Validated as a config.json would be.
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c));
  if (!parsed.ok()) return absl::Status(parsed.status().code(), absl::StrCat(file.path(), ": ", parsed.status().message()));
  return parsed;
}

GgufMetadata GgufModelMetadata(const ModelConfig& c, const std::string& name, uint32_t file_type) {
  const std::string arch(GgufArchitectureName(c.architecture));
  auto u32 = [](int64_t v) { return GgufValue::Uint32(static_cast<uint32_t>(v)); };
  GgufMetadata m = {
      {"general.architecture", GgufValue::String(arch)},
      {"general.name", GgufValue::String(name)},
      {"general.file_type", GgufValue::Uint32(file_type)},
      {"general.quantization_version", GgufValue::Uint32(2)},
      {arch + ".vocab_size", u32(c.vocab_size)},
      {arch + ".context_length", u32(c.max_position_embeddings)},
      {arch + ".embedding_length", u32(c.hidden_size)},
      {arch + ".block_count", u32(c.num_layers)},
      {arch + ".feed_forward_length", u32(c.intermediate_size)},
      {arch + ".rope.dimension_count", u32(c.head_dim)},
      {arch + ".attention.head_count", u32(c.num_heads)},
      {arch + ".attention.head_count_kv", u32(c.num_kv_heads)},
      {arch + ".attention.key_length", u32(c.head_dim)},
      {arch + ".attention.value_length", u32(c.head_dim)},
      {arch + ".rope.freq_base", GgufValue::Float32(static_cast<float>(c.rope_theta))},
      {arch + ".attention.layer_norm_rms_epsilon", GgufValue::Float32(static_cast<float>(c.rms_norm_eps))},
  };
  return m;
}

absl::StatusOr<GgufMetadata> GgufGenerationMetadata(std::string_view generation_config_json) {
  ASSIGN_OR_RETURN(GenerationConfig g, ParseGenerationConfig(generation_config_json));
  GgufMetadata m;
  if (g.temperature.has_value()) m.emplace_back("general.sampling.temp", GgufValue::Float32(static_cast<float>(*g.temperature)));
  if (g.top_k.has_value()) m.emplace_back("general.sampling.top_k", GgufValue::Int32(static_cast<int32_t>(*g.top_k)));
  if (g.top_p.has_value()) m.emplace_back("general.sampling.top_p", GgufValue::Float32(static_cast<float>(*g.top_p)));
  if (g.repetition_penalty.has_value()) {
    m.emplace_back("general.sampling.penalty_repeat", GgufValue::Float32(static_cast<float>(*g.repetition_penalty)));
  }
  m.emplace_back("kvtier.generation_config", GgufValue::String(std::string(generation_config_json)));
  return m;
}

absl::StatusOr<std::optional<GenerationConfig>> GenerationConfigFromGguf(const GgufFile& file) {
  if (const GgufValue* text = file.Find("kvtier.generation_config")) {
    if (text->AsString() == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": kvtier.generation_config must be a string"));
    }
    absl::StatusOr<GenerationConfig> parsed = ParseGenerationConfig(*text->AsString());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": kvtier.generation_config: ", parsed.status().message()));
    }
    return std::optional<GenerationConfig>(*std::move(parsed));
  }
  GenerationConfig g;
  bool any = false;
  for (const char* key : {"general.sampling.temp", "general.sampling.top_k", "general.sampling.top_p",
                          "general.sampling.penalty_repeat"}) {
    const GgufValue* v = file.Find(key);
    if (v == nullptr) continue;
    const std::optional<double> r = v->AsReal();
    if (!r.has_value()) return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", key, " must be a number"));
    any = true;
    const double value = v->element_type() == GgufValueType::kFloat32 ? ShortestDouble(*r) : *r;
    const std::string_view name(key);
    if (name.ends_with("temp")) {
      g.temperature = value;
      g.do_sample = value > 0;
    } else if (name.ends_with("top_k")) {
      g.top_k = static_cast<int64_t>(value);
    } else if (name.ends_with("top_p")) {
      g.top_p = value;
    } else {
      g.repetition_penalty = value;
    }
  }
  return any ? std::optional<GenerationConfig>(g) : std::nullopt;
}

std::optional<std::string> GgufTensorName(std::string_view hf_name) {
  for (const auto& [hf, gguf] : kGlobalNames) {
    if (hf_name == hf) return std::string(gguf);
  }
  if (auto split = SplitLayer(hf_name, "model.layers.")) {
    for (const auto& [hf, gguf] : kLayerNames) {
      if (split->second == hf) return absl::StrCat("blk.", split->first, ".", std::string(gguf));
    }
  }
  return std::nullopt;
}

std::optional<std::string> HfTensorName(std::string_view gguf_name) {
  for (const auto& [hf, gguf] : kGlobalNames) {
    if (gguf_name == gguf) return std::string(hf);
  }
  if (auto split = SplitLayer(gguf_name, "blk.")) {
    for (const auto& [hf, gguf] : kLayerNames) {
      if (split->second == gguf) return absl::StrCat("model.layers.", split->first, ".", std::string(hf));
    }
  }
  return std::nullopt;
}

std::optional<int64_t> RopePermutedHeads(const ModelConfig& config, std::string_view hf_name) {
  if (GgufArchitectureName(config.architecture) != "llama") return std::nullopt;
  if (hf_name.ends_with("self_attn.q_proj.weight") || hf_name.ends_with("self_attn.q_proj.bias")) {
    return config.num_heads;
  }
  if (hf_name.ends_with("self_attn.k_proj.weight") || hf_name.ends_with("self_attn.k_proj.bias")) {
    return config.num_kv_heads;
  }
  return std::nullopt;
}

void PermuteRopeRows(const uint8_t* in, uint8_t* out, int64_t rows, size_t row_bytes, int64_t heads, bool to_gguf) {
  const int64_t per_head = rows / heads, half = per_head / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t hf_row = h * per_head + s * half + i;
        const int64_t gguf_row = h * per_head + 2 * i + s;
        const int64_t from = to_gguf ? hf_row : gguf_row, to = to_gguf ? gguf_row : hf_row;
        std::memcpy(out + static_cast<size_t>(to) * row_bytes, in + static_cast<size_t>(from) * row_bytes, row_bytes);
      }
    }
  }
}

std::vector<float> Llama3RopeFactors(const Llama3RopeScaling& s, double rope_theta, int64_t head_dim) {
  const double low_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.low_freq_factor;
  const double high_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(rope_theta, static_cast<double>(i) / static_cast<double>(head_dim));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double factor;
    if (wavelen < high_wavelen) {
      factor = 1.0;
    } else if (wavelen > low_wavelen) {
      factor = s.factor;
    } else {
      const double smooth = (static_cast<double>(s.original_max_position_embeddings) / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      factor = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    factors.push_back(static_cast<float>(factor));
  }
  return factors;
}

}  // namespace kvtier
