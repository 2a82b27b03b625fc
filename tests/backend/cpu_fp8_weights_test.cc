// The CPU backend on quantized checkpoints: for each downloadable FP8 layout, and for a GGUF
// file whose matrices are blocks of every GGUF block type kvtier reads, the logits equal
// those of an fp32 checkpoint holding the dequantized values of the same weights, so the
// quantized paths add nothing but the dequantization checked in tests/model (and against
// llama.cpp in tests/gguf).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/gguf_export.h"
#include "model/gguf_file.h"
#include "model/random_checkpoint.h"
#include "model/safetensors_writer.h"
#include "nlohmann/json.hpp"
#include "testing/block_quantized_gguf.h"

namespace kvtier {
namespace {

constexpr int64_t kBlockTokens = 4;

std::unique_ptr<Checkpoint> Open(const std::string& dir) {
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return checkpoint.ok() ? std::move(*checkpoint) : nullptr;
}

// Writes `fp8`'s tensors dequantized to F32 (scale tensors dropped) with its config.json
// minus quantization_config into `dir`.
void WriteDequantizedCopy(const Checkpoint& fp8, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::ifstream in(fp8.path() + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.erase("quantization_config");
  config["torch_dtype"] = "float32";
  std::ofstream(dir + "/config.json") << config.dump();
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : fp8.TensorNames()) {
    if (name.find("weight_scale") != std::string::npos) continue;
    auto values = std::make_shared<std::vector<float>>();
    ASSERT_TRUE(fp8.TensorAsFloat32(name, values.get()).ok()) << name;
    TensorToWrite t;
    t.name = name;
    t.shape = fp8.Tensor(name)->shape;
    t.dtype = DType::kF32;
    t.produce = [values](int64_t first, int64_t count, uint8_t* out) {
      std::memcpy(out, values->data() + first, static_cast<size_t>(count) * sizeof(float));
    };
    tensors.push_back(std::move(t));
  }
  ASSERT_TRUE(WriteSafetensorsCheckpoint(dir, tensors, SafetensorsWriteOptions{}).ok());
}

std::vector<float> Logits(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens,
                          StorageDType weight_dtype = StorageDType::kAuto) {
  BackendOptions options;
  options.weight_dtype = weight_dtype;
  options.num_threads = 1;
  options.block_tokens = kBlockTokens;
  auto backend = CpuBackend::Create(checkpoint, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  EXPECT_TRUE((*backend)->AllocateKvPool(8).ok());
  const std::vector<int32_t> table = {3, 1, 4};
  ForwardBatch batch;
  batch.chunks.push_back({.tokens = tokens, .start_position = 0, .block_table = table, .need_logits = true});
  std::vector<float> logits;
  const absl::Status status = (*backend)->Forward(batch, &logits);
  EXPECT_TRUE(status.ok()) << status;
  return logits;
}

TEST(CpuFp8WeightsTest, LogitsEqualThoseOfTheDequantizedFp32Checkpoint) {
  const std::string base = absl::StrCat(::testing::TempDir(), "/kvtier_cpu_fp8_", getpid());
  const std::vector<int32_t> tokens = {5, 99, 17, 260, 3, 42, 7};
  for (int layout = 0; layout < 4; ++layout) {
    RandomCheckpointSpec spec = *RandomCheckpointPreset("tiny-llama");
    spec.dtype = DType::kBF16;
    spec.seed = 11;
    WeightQuantization& q = spec.quantization;
    q.format = layout == 0   ? WeightQuantizationFormat::kFp8PerTensor
               : layout == 1 ? WeightQuantizationFormat::kFp8Blockwise
                             : WeightQuantizationFormat::kCompressedTensorsFloat;
    q.block_rows = 32;
    q.block_cols = 48;
    q.per_channel = layout == 3;
    const std::string fp8_dir = absl::StrCat(base, "_fp8_", layout);
    const std::string f32_dir = absl::StrCat(base, "_f32_", layout);
    ASSERT_TRUE(WriteRandomCheckpoint(spec, fp8_dir).ok());
    std::unique_ptr<Checkpoint> fp8 = Open(fp8_dir);
    ASSERT_NE(fp8, nullptr);
    WriteDequantizedCopy(*fp8, f32_dir);
    std::unique_ptr<Checkpoint> f32 = Open(f32_dir);
    ASSERT_NE(f32, nullptr);
    const std::vector<float> a = Logits(*fp8, tokens);
    const std::vector<float> b = Logits(*f32, tokens);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, b) << "layout " << layout;
    std::filesystem::remove_all(fp8_dir);
    std::filesystem::remove_all(f32_dir);
  }
}

// weight_dtype fp8 quantizes each output channel at load with amax / 448: on an fp32
// checkpoint that is exactly what mkmodel --fp8 ct-channel wrote for the same seed.
TEST(CpuFp8WeightsTest, WeightDtypeFp8EqualsTheChannelQuantizedCheckpoint) {
  const std::string base = absl::StrCat(::testing::TempDir(), "/kvtier_cpu_fp8_load_", getpid());
  RandomCheckpointSpec spec = *RandomCheckpointPreset("tiny-qwen2");  // biases, tied embeddings
  spec.dtype = DType::kF32;
  spec.seed = 23;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, base + "_f32").ok());
  spec.quantization.format = WeightQuantizationFormat::kCompressedTensorsFloat;
  spec.quantization.per_channel = true;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, base + "_ct").ok());
  std::unique_ptr<Checkpoint> f32 = Open(base + "_f32");
  std::unique_ptr<Checkpoint> ct = Open(base + "_ct");
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(ct, nullptr);
  const std::vector<int32_t> tokens = {9, 8, 300, 1, 77};
  const std::vector<float> quantized_at_load = Logits(*f32, tokens, StorageDType::kFp8);
  ASSERT_FALSE(quantized_at_load.empty());
  EXPECT_EQ(quantized_at_load, Logits(*ct, tokens));
  // ... and fp8 rounding changed the weights: the fp32 logits differ.
  EXPECT_NE(quantized_at_load, Logits(*f32, tokens));
  // bf16 rounding is applied too (another set of values again).
  const std::vector<float> bf16 = Logits(*f32, tokens, StorageDType::kBf16);
  EXPECT_NE(bf16, Logits(*f32, tokens));
  EXPECT_NE(bf16, quantized_at_load);
  std::filesystem::remove_all(base + "_f32");
  std::filesystem::remove_all(base + "_ct");
}

// GGUF: Q8_0, Q4_0, Q4_K, Q5_K and Q6_K matrices (the Q and K rows of this llama model
// interleaved as llama.cpp stores them) against the F32 GGUF file kvtier convert writes of
// the same checkpoint.
TEST(CpuGgufWeightsTest, LogitsEqualThoseOfTheDequantizedF32File) {
  const std::string base = absl::StrCat(::testing::TempDir(), "/kvtier_cpu_gguf_", getpid());
  RandomCheckpointSpec spec = *RandomCheckpointPreset("small-llama");  // rows of 256 and 768
  spec.seed = 31;
  ASSERT_TRUE(testing::WriteBlockQuantizedGguf(spec, base + "_blocks.gguf").ok());
  std::unique_ptr<Checkpoint> blocks = Open(base + "_blocks.gguf");
  ASSERT_NE(blocks, nullptr);
  std::map<std::string, int> types;
  for (const GgufTensorInfo& t : blocks->gguf()->tensors()) ++types[std::string(t.type->name)];
  for (const char* type : {"Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"}) EXPECT_GE(types[type], 3) << type;
  GgufExportOptions f32;
  f32.type = DType::kF32;
  ASSERT_TRUE(WriteGgufModel(blocks->config(), CheckpointTensorsToWrite(*blocks), base + "_f32.gguf", f32).ok());
  std::unique_ptr<Checkpoint> dequantized = Open(base + "_f32.gguf");
  ASSERT_NE(dequantized, nullptr);
  const std::vector<int32_t> tokens = {5, 99, 17, 2600, 3, 42, 4095};
  const std::vector<float> a = Logits(*blocks, tokens);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, Logits(*dequantized, tokens));
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float v) { return std::isfinite(v); }));
  EXPECT_NE(*std::min_element(a.begin(), a.end()), *std::max_element(a.begin(), a.end()));
  std::filesystem::remove(base + "_blocks.gguf");
  std::filesystem::remove(base + "_f32.gguf");
}

TEST(CpuFp8WeightsTest, KvDtype16BitIsRefusedNamingIt) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/kvtier_cpu_fp8_kv_", getpid());
  ASSERT_TRUE(WriteRandomCheckpoint(*RandomCheckpointPreset("tiny-llama"), dir).ok());
  std::unique_ptr<Checkpoint> checkpoint = Open(dir);
  ASSERT_NE(checkpoint, nullptr);
  BackendOptions options;
  options.kv_dtype = StorageDType::kFp16;
  auto backend = CpuBackend::Create(*checkpoint, options);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(backend.status().message().find("kv_dtype 'fp16'"), std::string::npos) << backend.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
