// WeightQuantization: how a checkpoint's linear weights are stored, read from config.json's
// quantization_config. kvtier reads the three FP8 (E4M3) layouts found in downloaded
// checkpoints; any other method is refused by name. Immutable value type; thread-safe.
#ifndef KVTIER_MODEL_WEIGHT_QUANTIZATION_H_
#define KVTIER_MODEL_WEIGHT_QUANTIZATION_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvtier {

enum class WeightQuantizationFormat {
  kNone,  // no quantization_config: weights are F32/F16/BF16
  // quant_method "fp8" (AutoFP8 / vLLM "-FP8" checkpoints): <w>.weight F8_E4M3 with a scalar
  // <w>.weight_scale, and a scalar <w>.input_scale when activation_scheme is "static".
  kFp8PerTensor,
  // quant_method "fp8" with weight_block_size [br, bc] (transformers' FineGrainedFP8):
  // <w>.weight_scale_inv [ceil(rows / br), ceil(cols / bc)]; value = code * scale_inv.
  kFp8Blockwise,
  // quant_method "compressed-tensors", format "float-quantized" (llm-compressor): weight
  // strategy "tensor" (<w>.weight_scale [1]) or "channel" (<w>.weight_scale [rows, 1]).
  kCompressedTensorsFloat,
};

struct WeightQuantization {
  WeightQuantizationFormat format = WeightQuantizationFormat::kNone;
  int64_t block_rows = 0;  // kFp8Blockwise
  int64_t block_cols = 0;
  bool per_channel = false;  // kCompressedTensorsFloat with strategy "channel"
  // "static" (input_scale tensors), "dynamic" (per token at run time) or "none"
  // (weight-only). kvtier computes activations in 16 bits, so this is informational.
  std::string activation_scheme = "none";

  bool quantized() const { return format != WeightQuantizationFormat::kNone; }
  // "<w>.weight_scale_inv" for blockwise, "<w>.weight_scale" otherwise (<w>.weight given).
  std::string ScaleTensorName(std::string_view weight_name) const;
  // One line for `kvtier inspect`, e.g. "fp8 blockwise 128x128 (weight_scale_inv), dynamic
  // activations"; "none" when not quantized.
  std::string Describe() const;
};

// Reads quantization_config from config.json text (kNone when absent). Unimplemented naming
// quant_method (or the compressed-tensors format / strategy / number type) for any layout
// above not matched; InvalidArgument for a malformed quantization_config.
absl::StatusOr<WeightQuantization> ParseWeightQuantization(std::string_view config_json);

}  // namespace kvtier

#endif  // KVTIER_MODEL_WEIGHT_QUANTIZATION_H_
