// FP8 checkpoints: quantization_config parsing (the three layouts read, everything else
// refused by name), random FP8 checkpoints written in each layout and read back to the
// values their codes and scales define, and the refusals of inconsistent fp8 checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/fp8_e4m3.h"
#include "common/thread_pool.h"
#include "model/checkpoint.h"
#include "model/fp8_weights.h"
#include "model/random_checkpoint.h"
#include "model/weight_quantization.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::ReadBytes;
using ::kvtier::testing::TempDir;
using ::kvtier::testing::WriteBytes;

absl::StatusOr<WeightQuantization> Scheme(const std::string& quantization_config) {
  return ParseWeightQuantization(R"({"model_type": "llama", "quantization_config": )" + quantization_config + "}");
}

TEST(WeightQuantizationTest, ReadsTheThreeFp8Layouts) {
  auto none = ParseWeightQuantization(R"({"model_type": "llama"})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->quantized());
  EXPECT_EQ(none->Describe(), "none");

  auto per_tensor = Scheme(R"({"quant_method": "fp8", "activation_scheme": "static"})");
  ASSERT_TRUE(per_tensor.ok()) << per_tensor.status();
  EXPECT_EQ(per_tensor->format, WeightQuantizationFormat::kFp8PerTensor);
  EXPECT_EQ(per_tensor->activation_scheme, "static");
  EXPECT_EQ(per_tensor->ScaleTensorName("model.layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight_scale");

  auto block = Scheme(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                         "weight_block_size": [128, 64]})");
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_EQ(block->format, WeightQuantizationFormat::kFp8Blockwise);
  EXPECT_EQ(block->block_rows, 128);
  EXPECT_EQ(block->block_cols, 64);
  EXPECT_EQ(block->ScaleTensorName("a.q_proj.weight"), "a.q_proj.weight_scale_inv");
  EXPECT_NE(block->Describe().find("128x64"), std::string::npos) << block->Describe();

  auto channel = Scheme(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}},
      "ignore": ["lm_head"]})");
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_EQ(channel->format, WeightQuantizationFormat::kCompressedTensorsFloat);
  EXPECT_TRUE(channel->per_channel);
  EXPECT_EQ(channel->activation_scheme, "dynamic");

  auto tensor = Scheme(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"format": "float-quantized",
        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}, "input_activations": null}}})");
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_FALSE(tensor->per_channel);
  EXPECT_EQ(tensor->activation_scheme, "none");
}

TEST(WeightQuantizationTest, RefusesOtherMethodsNamingThem) {
  struct Case {
    std::string config;
    std::string named;
  };
  const std::vector<Case> cases = {
      {R"({"quant_method": "awq", "bits": 4})", "'awq'"},
      {R"({"quant_method": "gptq"})", "'gptq'"},
      {R"({"quant_method": "bitsandbytes"})", "'bitsandbytes'"},
      {R"({"quant_method": "fp8", "fmt": "e5m2"})", "'e5m2'"},
      {R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": {
          "weights": {"num_bits": 4, "type": "int", "strategy": "group"}}}})", "'pack-quantized'"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {
          "weights": {"num_bits": 8, "type": "float", "strategy": "block"}}}})", "'block'"},
      {R"({"quant_method": "compressed-tensors", "format": "naive-quantized", "config_groups": {"g": {
          "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}})", "'naive-quantized'"},
  };
  for (const Case& c : cases) {
    auto q = Scheme(c.config);
    ASSERT_FALSE(q.ok()) << c.config;
    EXPECT_EQ(q.status().code(), absl::StatusCode::kUnimplemented) << q.status();
    EXPECT_NE(q.status().message().find(c.named), std::string::npos) << q.status();
  }
  for (const std::string bad : {R"("fp8")", R"({"bits": 8})", R"({"quant_method": "fp8", "weight_block_size": [0, 128]})",
                                R"({"quant_method": "compressed-tensors"})"}) {
    auto q = Scheme(bad);
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument) << bad << " " << q.status();
  }
}

TEST(Fp8WeightsTest, QuantizeRowsUsesAmaxOver448PerRow) {
  const std::vector<float> w = {0.5f, -2.0f, 1.0f, 0.0f, 0.0f, 0.0f, 3.0f, 0.001f, -0.25f};
  std::vector<uint8_t> codes(9);
  std::vector<float> scales(3);
  QuantizeRowsFp8(w.data(), 3, 3, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 2.0f / 448.0f);
  EXPECT_EQ(scales[1], 1.0f);  // an all-zero row
  EXPECT_EQ(scales[2], 3.0f / 448.0f);
  EXPECT_EQ(codes[1], 0xfe);  // -amax -> -448
  EXPECT_EQ(codes[6], 0x7e);
  EXPECT_EQ(codes[3], 0x00);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(codes[i], FloatToFp8E4M3(w[i] / scales[i / 3])) << i;
}

RandomCheckpointSpec Fp8Spec(WeightQuantizationFormat format, bool per_channel = false) {
  RandomCheckpointSpec spec = *RandomCheckpointPreset("tiny-llama");
  spec.dtype = DType::kBF16;
  spec.quantization.format = format;
  spec.quantization.per_channel = per_channel;
  spec.quantization.activation_scheme = "dynamic";
  if (format == WeightQuantizationFormat::kFp8Blockwise) {
    spec.quantization.block_rows = 48;  // ragged edge tiles on 64- and 128-wide matrices
    spec.quantization.block_cols = 40;
  }
  return spec;
}

// Every quantized projection reads back as code x scale, within fp8 precision of the
// random value it encodes, the same with its rows split over threads; 16-bit tensors are
// untouched.
void CheckRoundTrip(const RandomCheckpointSpec& spec) {
  ThreadPool pool(3);
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->quantization().format, spec.quantization.format);
  EXPECT_EQ((*ckpt)->quantization().per_channel, spec.quantization.per_channel);
  for (const std::string name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
                                 "model.layers.1.mlp.gate_proj.weight"}) {
    auto weight = (*ckpt)->Tensor(name);
    ASSERT_TRUE(weight.ok());
    ASSERT_EQ(weight->dtype, DType::kF8E4M3) << name;
    auto scales = (*ckpt)->Fp8ScalesOf(*weight);
    ASSERT_TRUE(scales.ok()) << scales.status();
    std::vector<float> values, on_threads;
    ASSERT_TRUE((*ckpt)->TensorAsFloat32(name, &values).ok());
    ASSERT_TRUE((*ckpt)->TensorAsFloat32(name, &on_threads, &pool).ok());
    EXPECT_EQ(on_threads, values) << name;  // rows split over threads: the same values
    const int64_t rows = weight->shape[0], cols = weight->shape[1];
    ASSERT_EQ(values.size(), static_cast<size_t>(rows * cols));
    // kvtier's per-channel format straight from the codes (in two row ranges, as threads take
    // them): the bytes of quantizing the values above.
    std::vector<uint8_t> want_codes(values.size()), codes(values.size());
    std::vector<float> want_scales(static_cast<size_t>(rows)), requantized_scales(static_cast<size_t>(rows));
    QuantizeRowsFp8(values.data(), rows, cols, want_codes.data(), want_scales.data());
    RequantizeFp8Rows(*weight, *scales, 0, rows / 3, codes.data(), requantized_scales.data());
    RequantizeFp8Rows(*weight, *scales, rows / 3, rows, codes.data(), requantized_scales.data());
    EXPECT_EQ(codes, want_codes) << name;
    EXPECT_EQ(requantized_scales, want_scales) << name;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const float scale = scales->At(r, c);
        const float original = RandomWeight(spec.seed, name, weight->shape, i);
        ASSERT_EQ(values[i], Fp8E4M3ToFloat(FloatToFp8E4M3(original / scale)) * scale) << name << " " << i;
        // 3 mantissa bits: half an ulp is 1/16 relative; subnormals: 2^-10 of the scale.
        ASSERT_LE(std::fabs(values[i] - original), std::fmax(std::fabs(original) / 16, scale / 1024) * 1.0001f)
            << name << " " << i;
      }
    }
  }
  auto norm = (*ckpt)->Tensor("model.layers.0.input_layernorm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->dtype, DType::kBF16);
  auto embed = (*ckpt)->Tensor("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ(embed->dtype, DType::kBF16);
}

TEST(Fp8CheckpointTest, PerTensorRoundTrips) { CheckRoundTrip(Fp8Spec(WeightQuantizationFormat::kFp8PerTensor)); }
TEST(Fp8CheckpointTest, BlockwiseRoundTrips) { CheckRoundTrip(Fp8Spec(WeightQuantizationFormat::kFp8Blockwise)); }
TEST(Fp8CheckpointTest, CompressedTensorsPerTensorRoundTrips) {
  CheckRoundTrip(Fp8Spec(WeightQuantizationFormat::kCompressedTensorsFloat));
}
TEST(Fp8CheckpointTest, CompressedTensorsPerChannelRoundTrips) {
  CheckRoundTrip(Fp8Spec(WeightQuantizationFormat::kCompressedTensorsFloat, /*per_channel=*/true));
}

TEST(Fp8CheckpointTest, ScaleShapesAreThoseOfTheFormats) {
  struct Case {
    RandomCheckpointSpec spec;
    std::string scale;
    std::vector<int64_t> shape;
  };
  // q_proj of tiny-llama: [64, 64]; gate_proj [128, 64].
  const std::vector<Case> cases = {
      {Fp8Spec(WeightQuantizationFormat::kFp8PerTensor), "model.layers.0.self_attn.q_proj.weight_scale", {}},
      {Fp8Spec(WeightQuantizationFormat::kFp8Blockwise), "model.layers.0.mlp.gate_proj.weight_scale_inv", {3, 2}},
      {Fp8Spec(WeightQuantizationFormat::kCompressedTensorsFloat), "model.layers.0.mlp.gate_proj.weight_scale", {1}},
      {Fp8Spec(WeightQuantizationFormat::kCompressedTensorsFloat, true), "model.layers.0.mlp.gate_proj.weight_scale",
       {128, 1}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    ASSERT_TRUE(WriteRandomCheckpoint(c.spec, dir.path()).ok());
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto scale = (*ckpt)->Tensor(c.scale);
    ASSERT_TRUE(scale.ok()) << scale.status();
    EXPECT_EQ(scale->shape, c.shape) << c.scale;
    EXPECT_EQ(scale->dtype, DType::kF32);
  }
}

// Rewrites config.json's quantization_config (null removes it).
void SetQuantizationConfig(const TempDir& dir, const nlohmann::json& q) {
  nlohmann::json config = nlohmann::json::parse(ReadBytes(dir / "config.json"));
  if (q.is_null()) {
    config.erase("quantization_config");
  } else {
    config["quantization_config"] = q;
  }
  WriteBytes(dir / "config.json", config.dump());
}

TEST(Fp8CheckpointTest, InconsistentCheckpointsAreRefusedNamingTheProblem) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(Fp8Spec(WeightQuantizationFormat::kCompressedTensorsFloat, true), dir.path()).ok());
  ASSERT_TRUE(Checkpoint::Open(dir.path()).ok());

  SetQuantizationConfig(dir, nullptr);  // F8_E4M3 tensors with nothing saying how to scale them
  auto status = Checkpoint::Open(dir.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("F8_E4M3"), std::string::npos) << status;

  SetQuantizationConfig(dir, {{"quant_method", "awq"}});
  status = Checkpoint::Open(dir.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_NE(status.message().find("'awq'"), std::string::npos) << status;

  // Per-tensor says the channel scales [rows, 1] are scalars: refused naming the scale.
  SetQuantizationConfig(dir, {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}});
  status = Checkpoint::Open(dir.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("weight_scale'"), std::string::npos) << status;

  // Block-wise looks for weight_scale_inv, which this checkpoint does not have.
  SetQuantizationConfig(dir, {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}});
  status = Checkpoint::Open(dir.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("weight_scale_inv"), std::string::npos) << status;
}

TEST(Fp8CheckpointTest, FingerprintDiffersFromTheUnquantizedModel) {
  TempDir plain, fp8;
  RandomCheckpointSpec spec = Fp8Spec(WeightQuantizationFormat::kFp8PerTensor);
  ASSERT_TRUE(WriteRandomCheckpoint(spec, fp8.path()).ok());
  spec.quantization = WeightQuantization{};
  ASSERT_TRUE(WriteRandomCheckpoint(spec, plain.path()).ok());
  auto a = Checkpoint::Open(plain.path());
  auto b = Checkpoint::Open(fp8.path());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->Fingerprint(), (*b)->Fingerprint());
}

}  // namespace
}  // namespace kvtier
