// quantization_config parsing (weight_quantization.h). Stateless; thread-safe.
#include "model/weight_quantization.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

constexpr char kSupported[] =
    "supported: quant_method \"fp8\" (per-tensor weight_scale or block-wise weight_scale_inv) and "
    "\"compressed-tensors\" with format \"float-quantized\" (tensor or channel weight scales)";

absl::Status Unsupported(const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("quantization_config: ", what, " is not supported (", kSupported, ")"));
}

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("quantization_config: ", what));
}

std::string StringOr(const nlohmann::json& object, const char* key, const std::string& fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

absl::StatusOr<WeightQuantization> ParseFp8(const nlohmann::json& q) {
  WeightQuantization out;
  out.activation_scheme = StringOr(q, "activation_scheme", "dynamic");
  if (out.activation_scheme != "static" && out.activation_scheme != "dynamic") {
    return Unsupported(absl::StrCat("fp8 activation_scheme '", out.activation_scheme, "'"));
  }
  const std::string fmt = StringOr(q, "fmt", "e4m3");
  if (fmt != "e4m3") return Unsupported(absl::StrCat("fp8 fmt '", fmt, "'"));
  auto block = q.find("weight_block_size");
  if (block == q.end() || block->is_null()) {
    out.format = WeightQuantizationFormat::kFp8PerTensor;
    return out;
  }
  if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0) {
    return Malformed(absl::StrCat("weight_block_size must be two positive integers, got ", block->dump()));
  }
  out.format = WeightQuantizationFormat::kFp8Blockwise;
  out.block_rows = (*block)[0].get<int64_t>();
  out.block_cols = (*block)[1].get<int64_t>();
  return out;
}

// One config group of compressed-tensors: its weights must be 8-bit floats with a tensor or
// channel strategy; its input activations decide the activation scheme.
absl::Status ParseCompressedGroup(const std::string& name, const nlohmann::json& group, const std::string& top_format,
                                  WeightQuantization* out, bool first) {
  if (!group.is_object()) return Malformed(absl::StrCat("config_groups.", name, " is not an object"));
  const std::string format = StringOr(group, "format", top_format);
  if (format != "float-quantized") {
    return Unsupported(absl::StrCat("compressed-tensors format '", format, "'"));
  }
  auto weights = group.find("weights");
  if (weights == group.end() || !weights->is_object()) {
    return Malformed(absl::StrCat("config_groups.", name, " has no 'weights' object"));
  }
  const std::string type = StringOr(*weights, "type", "");
  auto bits = weights->find("num_bits");
  if (type != "float" || bits == weights->end() || !bits->is_number_integer() || bits->get<int>() != 8) {
    return Unsupported(absl::StrCat("compressed-tensors weights of type '", type, "' with num_bits ",
                                    bits == weights->end() ? "(missing)" : bits->dump()));
  }
  const std::string strategy = StringOr(*weights, "strategy", "");
  if (strategy != "tensor" && strategy != "channel") {
    return Unsupported(absl::StrCat("compressed-tensors weight strategy '", strategy, "'"));
  }
  std::string scheme = "none";
  auto inputs = group.find("input_activations");
  if (inputs != group.end() && inputs->is_object()) {
    auto dynamic = inputs->find("dynamic");
    scheme = dynamic != inputs->end() && dynamic->is_boolean() && dynamic->get<bool>() ? "dynamic" : "static";
  }
  const bool per_channel = strategy == "channel";
  if (!first && (per_channel != out->per_channel || scheme != out->activation_scheme)) {
    return Unsupported("compressed-tensors config groups with different weight strategies or activation schemes");
  }
  out->per_channel = per_channel;
  out->activation_scheme = scheme;
  return absl::OkStatus();
}

absl::StatusOr<WeightQuantization> ParseCompressedTensors(const nlohmann::json& q) {
  WeightQuantization out;
  out.format = WeightQuantizationFormat::kCompressedTensorsFloat;
  const std::string top_format = StringOr(q, "format", "");
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return Malformed("compressed-tensors needs a non-empty 'config_groups' object");
  }
  bool first = true;
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    absl::Status status = ParseCompressedGroup(it.key(), it.value(), top_format, &out, first);
    if (!status.ok()) return status;
    first = false;
  }
  return out;
}

}  // namespace

std::string WeightQuantization::ScaleTensorName(std::string_view weight_name) const {
  std::string base(weight_name);
  const std::string suffix = ".weight";
  if (base.size() >= suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    base.resize(base.size() - suffix.size());
  }
  return base + (format == WeightQuantizationFormat::kFp8Blockwise ? ".weight_scale_inv" : ".weight_scale");
}

std::string WeightQuantization::Describe() const {
  const std::string activations = absl::StrCat(activation_scheme, " activation scales");
  switch (format) {
    case WeightQuantizationFormat::kNone:
      return "none";
    case WeightQuantizationFormat::kFp8PerTensor:
      return absl::StrCat("fp8 e4m3, per-tensor weight_scale, ", activations);
    case WeightQuantizationFormat::kFp8Blockwise:
      return absl::StrCat("fp8 e4m3, block-wise ", block_rows, "x", block_cols, " weight_scale_inv, ", activations);
    case WeightQuantizationFormat::kCompressedTensorsFloat:
      return absl::StrCat("compressed-tensors float-quantized fp8 e4m3, per-", per_channel ? "channel" : "tensor",
                          " weight_scale, ", activations);
  }
  return "?";
}

absl::StatusOr<WeightQuantization> ParseWeightQuantization(std::string_view config_json) {
  nlohmann::json json = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return Malformed("config.json is not a JSON object");
  auto q = json.find("quantization_config");
  if (q == json.end() || q->is_null()) return WeightQuantization{};
  if (!q->is_object()) return Malformed("is not an object");
  auto method = q->find("quant_method");
  if (method == q->end() || !method->is_string()) return Malformed("has no 'quant_method' string");
  const std::string name = method->get<std::string>();
  if (name == "fp8") return ParseFp8(*q);
  if (name == "compressed-tensors") return ParseCompressedTensors(*q);
  return Unsupported(absl::StrCat("quant_method '", name, "'"));
}

}  // namespace kvtier
