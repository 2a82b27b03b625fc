// Random-weight checkpoint writer (random_checkpoint.h; the presets are in
// random_checkpoint_presets.cc). Stateless; thread-safe.
#include "model/random_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/fp8_e4m3.h"
#include "model/checkpoint.h"
#include "model/fp8_weights.h"
#include "model/safetensors_writer.h"
#include "model/stable_hash.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

// How a tensor's elements are drawn: center + half_width * uniform(-1, 1).
struct WeightRule {
  uint64_t key;
  float center;
  float half_width;
};

WeightRule RuleFor(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape) {
  WeightRule rule;
  rule.key = SplitMix64(seed ^ Fnv1a64(name));
  if (absl::EndsWith(name, "norm.weight")) {  // RMSNorm gains: near 1, but not exactly
    rule.center = 1.0f;
    rule.half_width = 0.2f;
  } else if (absl::EndsWith(name, ".bias")) {  // large enough that a dropped bias shows
    rule.center = 0.0f;
    rule.half_width = 0.5f;
  } else {  // matrices: std 1/sqrt(fan_in) keeps activations O(1) at any width
    const double fan_in = shape.size() >= 2 ? static_cast<double>(shape[1]) : 1.0;
    rule.center = 0.0f;
    rule.half_width = static_cast<float>(std::sqrt(3.0 / fan_in));
  }
  return rule;
}

inline float Draw(const WeightRule& rule, int64_t index) {
  // Counter-based: splitmix64 stream position `index` of the tensor's key.
  const uint64_t bits = SplitMix64(rule.key + static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull);
  const float u = (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 8388608.0f) - 1.0f;  // (-1, 1)
  return rule.center + rule.half_width * u;
}

bool IsGemmaArch(Architecture arch) { return arch == Architecture::kGemma2 || arch == Architecture::kGemma3; }

// The longrope factors of a random Phi-3 (random_checkpoint.h).
LongRopeScaling RandomLongRope(int64_t head_dim, int64_t original_max_positions) {
  LongRopeScaling s;
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double x = static_cast<double>(i) / static_cast<double>(half);
    s.short_factor.push_back(1.0 + 0.5 * x);
    s.long_factor.push_back(1.0 + 7.0 * x * x);
  }
  s.original_max_position_embeddings = original_max_positions;
  return s;
}

// The experts of the config a spec describes (config_moe.h).
void SetMoeFields(const RandomCheckpointSpec& spec, ModelConfig* c) {
  if (spec.arch != Architecture::kMixtral && spec.arch != Architecture::kQwen3Moe) return;
  const RandomMoeSpec& m = spec.moe;
  c->moe.num_experts = m.experts;
  c->moe.top_k = m.top_k;
  const bool mixtral = spec.arch == Architecture::kMixtral;
  c->moe.expert_intermediate_size = mixtral || m.expert_intermediate <= 0 ? spec.intermediate : m.expert_intermediate;
  c->moe.norm_topk_prob = mixtral || m.norm_topk_prob;
  c->moe.sparse_layers.assign(static_cast<size_t>(std::max<int64_t>(spec.layers, 0)), true);
  for (int64_t layer : m.dense_layers) {
    if (layer >= 0 && layer < spec.layers) c->moe.sparse_layers[static_cast<size_t>(layer)] = false;
  }
}

// The family fields of the config a spec describes (config_families.h).
void SetFamilyFields(const RandomCheckpointSpec& spec, ModelConfig* c) {
  if (IsGemmaArch(spec.arch)) {
    c->activation = Activation::kGeluTanh;
    c->query_pre_attn_scalar = spec.query_pre_attn_scalar.value_or(static_cast<double>(spec.head_dim));
    c->attn_logit_softcap = spec.attn_logit_softcap;
    c->final_logit_softcap = spec.final_logit_softcap;
    if (spec.arch == Architecture::kGemma3) {
      c->gemma3_rope.local_theta = spec.rope_local_theta;
      c->gemma3_rope.linear_factor = spec.rope_linear_factor;
    }
  } else if (spec.arch != Architecture::kPhi3) {
    // Mistral, Mixtral and Qwen (max_window_layers 0): every layer in the window.
    if (spec.arch == Architecture::kLlama || !spec.sliding_window) return;
    c->sliding_window = spec.sliding_window;
    c->sliding_layers.assign(static_cast<size_t>(std::max<int64_t>(spec.layers, 0)), true);
    return;
  }
  c->sliding_window = spec.sliding_window;
  if (spec.sliding_window) {
    for (int64_t i = 0; i < spec.layers; ++i) {
      const bool gemma_sliding = spec.sliding_window_pattern <= 0 || (i + 1) % spec.sliding_window_pattern != 0;
      c->sliding_layers.push_back(spec.arch == Architecture::kPhi3 || gemma_sliding);
    }
  }
  if (spec.arch == Architecture::kPhi3 && spec.longrope_original_max_positions) {
    c->long_rope = RandomLongRope(spec.head_dim, *spec.longrope_original_max_positions);
  }
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

bool IsQuantizedProjection(const std::string& name) {
  // Mixtral's experts are w1/w2/w3; the routers (".gate.weight") stay unquantized, as in the
  // FP8 MoE checkpoints in the wild.
  for (const char* suffix : {"_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight"}) {
    if (absl::EndsWith(name, suffix)) return true;
  }
  return false;
}

// The scale grid of a quantized projection [rows, cols]: amax / 448 over each tile (1 for an
// all-zero tile), computed once on first use (the writer's threads share it).
class LazyFp8Scales {
 public:
  LazyFp8Scales(const WeightRule& rule, const WeightQuantization& q, int64_t rows, int64_t cols)
      : rule_(rule), rows_(rows), cols_(cols) {
    scales_.rows = rows;
    scales_.cols = cols;
    if (q.format == WeightQuantizationFormat::kFp8Blockwise) {
      scales_.block_rows = q.block_rows;
      scales_.block_cols = q.block_cols;
    } else if (q.format == WeightQuantizationFormat::kCompressedTensorsFloat && q.per_channel) {
      scales_.block_rows = 1;
      scales_.block_cols = cols;
    } else {
      scales_.block_rows = rows;
      scales_.block_cols = cols;
    }
    scales_.grid_rows = (rows + scales_.block_rows - 1) / scales_.block_rows;
    scales_.grid_cols = (cols + scales_.block_cols - 1) / scales_.block_cols;
  }

  // The grid's dimensions only (no values): what the scale tensor's shape needs, without
  // drawing the whole projection on the thread that lists the tensors.
  const Fp8Scales& Grid() const { return scales_; }

  const Fp8Scales& Get() {
    std::call_once(once_, [this] {
      scales_.values.assign(static_cast<size_t>(scales_.grid_rows * scales_.grid_cols), 0.0f);
      for (int64_t r = 0; r < rows_; ++r) {
        for (int64_t c = 0; c < cols_; ++c) {
          float& amax = scales_.values[(r / scales_.block_rows) * scales_.grid_cols + c / scales_.block_cols];
          amax = std::fmax(amax, std::fabs(Draw(rule_, r * cols_ + c)));
        }
      }
      for (float& v : scales_.values) v = v > 0.0f ? v / kFp8E4M3Max : 1.0f;
    });
    return scales_;
  }

 private:
  WeightRule rule_;
  int64_t rows_, cols_;
  std::once_flag once_;
  Fp8Scales scales_;
};

// The shape a format stores one projection's scales in (as the checkpoints in the wild do).
std::vector<int64_t> ScaleShape(const WeightQuantization& q, const Fp8Scales& grid) {
  switch (q.format) {
    case WeightQuantizationFormat::kFp8PerTensor:
      return {};
    case WeightQuantizationFormat::kFp8Blockwise:
      return {grid.grid_rows, grid.grid_cols};
    default:
      return q.per_channel ? std::vector<int64_t>{grid.grid_rows, 1} : std::vector<int64_t>{1};
  }
}

void AddQuantized(const std::string& name, const std::vector<int64_t>& shape, const WeightRule& rule,
                  const WeightQuantization& q, std::vector<TensorToWrite>* tensors) {
  auto scales = std::make_shared<LazyFp8Scales>(rule, q, shape[0], shape[1]);
  const int64_t cols = shape[1];
  TensorToWrite codes;
  codes.name = name;
  codes.shape = shape;
  codes.dtype = DType::kF8E4M3;
  codes.produce = [rule, scales, cols](int64_t first, int64_t count, uint8_t* out) {
    const Fp8Scales& grid = scales->Get();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t index = first + i;
      out[i] = FloatToFp8E4M3(Draw(rule, index) / grid.At(index / cols, index % cols));
    }
  };
  TensorToWrite scale;
  scale.name = q.ScaleTensorName(name);
  scale.shape = ScaleShape(q, scales->Grid());
  scale.dtype = DType::kF32;
  scale.produce = [scales](int64_t first, int64_t count, uint8_t* out) {
    std::memcpy(out, scales->Get().values.data() + first, static_cast<size_t>(count) * sizeof(float));
  };
  tensors->push_back(std::move(codes));
  tensors->push_back(std::move(scale));
}

// The tensors of the checkpoint `spec` describes, each producing its random values.
std::vector<TensorToWrite> RandomTensors(const RandomCheckpointSpec& spec, const ModelConfig& config) {
  std::vector<TensorToWrite> tensors;
  for (ExpectedTensor& expected : ExpectedTensors(config)) {
    const WeightRule rule = RuleFor(spec.seed, expected.name, expected.shape);
    if (spec.quantization.quantized() && IsQuantizedProjection(expected.name)) {
      AddQuantized(expected.name, expected.shape, rule, spec.quantization, &tensors);
      continue;
    }
    TensorToWrite t;
    t.name = std::move(expected.name);
    t.shape = std::move(expected.shape);
    t.dtype = spec.dtype;
    const DType dtype = spec.dtype;
    t.produce = [rule, dtype](int64_t first, int64_t count, uint8_t* out) {
      for (int64_t i = 0; i < count; ++i) {
        const float v = Draw(rule, first + i);
        if (dtype == DType::kF32) {
          std::memcpy(out + 4 * i, &v, 4);
        } else {
          const uint16_t bits = dtype == DType::kBF16 ? FloatToBf16(v) : FloatToFp16(v);
          out[2 * i] = static_cast<uint8_t>(bits);
          out[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
        }
      }
    };
    tensors.push_back(std::move(t));
  }
  return tensors;
}

// quantization_config as the tools that make these checkpoints write it.
nlohmann::ordered_json QuantizationConfigJson(const WeightQuantization& q) {
  nlohmann::ordered_json j;
  switch (q.format) {
    case WeightQuantizationFormat::kNone:
      return nullptr;
    case WeightQuantizationFormat::kFp8PerTensor:
      j["quant_method"] = "fp8";
      j["activation_scheme"] = "dynamic";
      return j;
    case WeightQuantizationFormat::kFp8Blockwise:
      j["quant_method"] = "fp8";
      j["activation_scheme"] = "dynamic";
      j["fmt"] = "e4m3";
      j["weight_block_size"] = {q.block_rows, q.block_cols};
      return j;
    case WeightQuantizationFormat::kCompressedTensorsFloat:
      break;
  }
  nlohmann::ordered_json group;
  group["targets"] = {"Linear"};
  group["weights"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", q.per_channel ? "channel" : "tensor"},
                      {"symmetric", true}, {"dynamic", false}};
  group["input_activations"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"},
                                {"symmetric", true}, {"dynamic", true}};
  j["quant_method"] = "compressed-tensors";
  j["format"] = "float-quantized";
  j["config_groups"] = {{"group_0", group}};
  j["ignore"] = {"lm_head"};
  j["quantization_status"] = "compressed";
  return j;
}

std::string ConfigJson(const RandomCheckpointSpec& spec, const ModelConfig& config) {
  if (!spec.quantization.quantized()) return ModelConfigToJson(config);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(ModelConfigToJson(config));
  j["quantization_config"] = QuantizationConfigJson(spec.quantization);
  return j.dump(2) + "\n";
}

SafetensorsWriteOptions WriteOptions(const RandomCheckpointSpec& spec) {
  SafetensorsWriteOptions options;
  options.max_shard_bytes = spec.max_shard_bytes;
  options.num_threads = spec.num_threads;
  return options;
}

}  // namespace

absl::StatusOr<ModelConfig> RandomCheckpointConfig(const RandomCheckpointSpec& spec) {
  if (spec.quantization.format == WeightQuantizationFormat::kFp8Blockwise &&
      (spec.quantization.block_rows <= 0 || spec.quantization.block_cols <= 0)) {
    return absl::InvalidArgumentError("fp8 block-wise quantization needs positive block sizes");
  }
  ModelConfig c;
  c.architecture = spec.arch;
  c.hidden_size = spec.hidden;
  c.num_layers = spec.layers;
  c.num_heads = spec.heads;
  c.num_kv_heads = spec.kv_heads;
  c.head_dim = spec.head_dim;
  c.intermediate_size = spec.intermediate;
  c.vocab_size = spec.vocab;
  c.max_position_embeddings = spec.max_positions;
  c.rms_norm_eps = spec.rms_norm_eps;
  c.rope_theta = spec.rope_theta;
  c.rope_scaling = spec.rope_scaling;
  c.tie_word_embeddings = spec.tie_embeddings;
  c.attention_bias = spec.arch == Architecture::kQwen2 ||
                     (spec.attention_bias && (spec.arch == Architecture::kLlama || spec.arch == Architecture::kQwen3 ||
                                              spec.arch == Architecture::kQwen3Moe || IsGemmaArch(spec.arch)));
  c.qk_norm = spec.arch == Architecture::kQwen3 || spec.arch == Architecture::kQwen3Moe ||
              spec.arch == Architecture::kGemma3;
  SetFamilyFields(spec, &c);
  SetMoeFields(spec, &c);
  // A spec of fp8 weights is a 16-bit model with spec.quantization over it.
  c.torch_dtype = std::string(TorchDTypeName(spec.dtype).value_or("bfloat16"));
  c.bos_token_id = spec.bos_token_id;
  c.eos_token_ids = spec.eos_token_ids;
  // Round trip through the parser: the written config.json must be one kvtier accepts.
  return ParseModelConfig(ModelConfigToJson(c));
}

float RandomWeight(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape, int64_t index) {
  return Draw(RuleFor(seed, name, shape), index);
}

absl::StatusOr<std::vector<TensorToWrite>> RandomCheckpointTensors(const RandomCheckpointSpec& spec) {
  ASSIGN_OR_RETURN(ModelConfig config, RandomCheckpointConfig(spec));
  return RandomTensors(spec, config);
}

absl::StatusOr<std::vector<std::string>> RandomCheckpointFiles(const RandomCheckpointSpec& spec) {
  ASSIGN_OR_RETURN(ModelConfig config, RandomCheckpointConfig(spec));
  std::vector<std::string> files = {"config.json", "generation_config.json"};
  for (std::string& name : SafetensorsCheckpointFiles(RandomTensors(spec, config), WriteOptions(spec))) {
    files.push_back(std::move(name));
  }
  return files;
}

absl::Status WriteRandomCheckpoint(const RandomCheckpointSpec& spec, const std::string& directory,
                                   const ProgressFn& progress) {
  ASSIGN_OR_RETURN(ModelConfig config, RandomCheckpointConfig(spec));
  ASSIGN_OR_RETURN(std::vector<std::string> files, RandomCheckpointFiles(spec));
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create directory ", directory, ": ", ec.message()));
  // A shard index this write does not replace would shadow its model.safetensors, and it is
  // not this function's file to delete: refuse before writing anything.
  const std::string index = directory + "/model.safetensors.index.json";
  if (std::find(files.begin(), files.end(), "model.safetensors.index.json") == files.end() &&
      std::filesystem::exists(std::filesystem::symlink_status(index, ec))) {
    return absl::FailedPreconditionError(absl::StrCat(
        index, " exists and would shadow the model.safetensors written here; it is not deleted: "
        "remove it or write the checkpoint elsewhere"));
  }
  RETURN_IF_ERROR(WriteTextFile(directory + "/config.json", ConfigJson(spec, config)));

  nlohmann::ordered_json generation;
  generation["_from_model_config"] = true;
  if (config.bos_token_id) generation["bos_token_id"] = *config.bos_token_id;
  if (config.eos_token_ids.size() == 1) {
    generation["eos_token_id"] = config.eos_token_ids[0];
  } else if (!config.eos_token_ids.empty()) {
    generation["eos_token_id"] = config.eos_token_ids;
  }
  RETURN_IF_ERROR(WriteTextFile(directory + "/generation_config.json", generation.dump(2) + "\n"));
  SafetensorsWriteOptions options = WriteOptions(spec);
  options.progress = progress;
  return WriteSafetensorsCheckpoint(directory, RandomTensors(spec, config), options);
}

}  // namespace kvtier
