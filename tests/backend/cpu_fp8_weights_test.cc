// The CPU backend on quantized checkpoints: for each downloadable FP8 layout, and for a GGUF
// file whose matrices are blocks of every GGUF block type kvtier reads, the logits equal
// those of an fp32 checkpoint holding the dequantized values of the same weights, so the
// quantized paths add nothing but the dequantization checked in tests/model (and against
// llama.cpp in tests/gguf); weight_dtype q8_0 / q4_k equal the GGUF file of that type.
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

// path: compute_path(), when given.
std::vector<float> Logits(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens,
                          StorageDType weight_dtype = StorageDType::kAuto,
                          CpuKernels kernels = CpuKernels::kReference, std::string* path = nullptr) {
  BackendOptions options;
  options.weight_dtype = weight_dtype;
  options.cpu_kernels = kernels;
  options.num_threads = 1;
  options.block_tokens = kBlockTokens;
  auto backend = CpuBackend::Create(checkpoint, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  if (path != nullptr) *path = (*backend)->compute_path();
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

// FP8 experts (Mixtral's w1/w2/w3, Qwen3-MoE's gate/up/down_proj) load through the same path:
// codes times scales, the routers left in the checkpoint's 16-bit type.
TEST(CpuFp8WeightsTest, MoeExpertsEqualTheirDequantizedFp32Checkpoint) {
  const std::string base = absl::StrCat(::testing::TempDir(), "/kvtier_cpu_fp8_moe_", getpid());
  const std::vector<int32_t> tokens = {5, 99, 17, 260, 3, 42, 7, 300, 11};
  for (const char* preset : {"tiny-mixtral", "tiny-qwen3moe"}) {
    RandomCheckpointSpec spec = *RandomCheckpointPreset(preset);
    spec.dtype = DType::kBF16;
    spec.quantization.format = WeightQuantizationFormat::kFp8Blockwise;
    spec.quantization.block_rows = 32;
    spec.quantization.block_cols = 32;
    const std::string fp8_dir = absl::StrCat(base, "_fp8_", preset);
    const std::string f32_dir = absl::StrCat(base, "_f32_", preset);
    ASSERT_TRUE(WriteRandomCheckpoint(spec, fp8_dir).ok());
    std::unique_ptr<Checkpoint> fp8 = Open(fp8_dir);
    ASSERT_NE(fp8, nullptr);
    const ExpertTensorNames names = ExpertNames(spec.arch);
    const std::string layer = "model.layers.1.";
    EXPECT_EQ(fp8->Tensor(absl::StrCat(layer, names.experts, 3, ".", names.down))->dtype, DType::kF8E4M3) << preset;
    EXPECT_EQ(fp8->Tensor(layer + names.router)->dtype, DType::kBF16) << preset;
    WriteDequantizedCopy(*fp8, f32_dir);
    std::unique_ptr<Checkpoint> f32 = Open(f32_dir);
    ASSERT_NE(f32, nullptr);
    const std::vector<float> a = Logits(*fp8, tokens);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, Logits(*f32, tokens)) << preset;
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
  // The fast kernels: the F32 file as the reference computes it, bit for bit; the blocks
  // with quantized activations, so near the reference but not equal (measured: 0.018 apart
  // at most, logits spanning -1.4 .. 1.3).
  EXPECT_EQ(Logits(*dequantized, tokens, StorageDType::kAuto, CpuKernels::kFast), a);
  const std::vector<float> fast = Logits(*blocks, tokens, StorageDType::kAuto, CpuKernels::kFast);
  ASSERT_EQ(fast.size(), a.size());
  EXPECT_NE(fast, a);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{fast[i]} - a[i]));
  std::printf("fast kernels against the reference: logits at most %.3g apart (range %.3g .. %.3g)\n", worst,
              *std::min_element(a.begin(), a.end()), *std::max_element(a.begin(), a.end()));
  EXPECT_LE(worst, 0.05);
  std::filesystem::remove(base + "_blocks.gguf");
  std::filesystem::remove(base + "_f32.gguf");
}

// weight_dtype q8_0 / q4_k: a checkpoint quantized at load computes exactly as the GGUF file
// of that type written from it (what `kvtier convert --type q8_0|q4_k` writes), with the
// fast kernels and with the reference.
struct Case {
  const char* preset;
  StorageDType weight_dtype;
  DType gguf_type;
  const char* path;  // what compute_path() names on the fast kernels
};

class CpuBlockWeightsTest : public ::testing::TestWithParam<Case> {};

// small-llama: rows of 256 and 768, whole blocks of both types, untied lm_head. tiny-qwen2:
// rows of 64 (whole Q8_0 blocks, not Q4_K's 256: held in F16 there, as the file stores
// them), tied embeddings, biases.
TEST_P(CpuBlockWeightsTest, QuantizedAtLoadEqualsTheGgufFileOfThatType) {
  const Case& c = GetParam();
  const std::string base = absl::StrCat(::testing::TempDir(), "/kvtier_cpu_blocks_", getpid(), "_", c.preset);
  RandomCheckpointSpec spec = *RandomCheckpointPreset(c.preset);
  spec.seed = 41;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, base).ok());
  std::unique_ptr<Checkpoint> checkpoint = Open(base);
  ASSERT_NE(checkpoint, nullptr);
  GgufExportOptions options;
  options.type = c.gguf_type;
  const std::string gguf_path = base + ".gguf";
  ASSERT_TRUE(WriteGgufModel(checkpoint->config(), CheckpointTensorsToWrite(*checkpoint), gguf_path, options).ok());
  std::unique_ptr<Checkpoint> gguf = Open(gguf_path);
  ASSERT_NE(gguf, nullptr);

  const std::vector<int32_t> tokens = {5, 99, 17, 260, 3, 42, 7};
  std::string at_load_path, file_path;
  const std::vector<float> at_load = Logits(*checkpoint, tokens, c.weight_dtype, CpuKernels::kFast, &at_load_path);
  ASSERT_FALSE(at_load.empty());
  EXPECT_EQ(at_load, Logits(*gguf, tokens, StorageDType::kAuto, CpuKernels::kFast, &file_path));
  EXPECT_EQ(at_load_path, file_path);
  EXPECT_NE(at_load_path.find(c.path), std::string::npos) << at_load_path;
  // The reference on the blocks' values, as on the file's.
  const std::vector<float> reference = Logits(*checkpoint, tokens, c.weight_dtype, CpuKernels::kReference);
  EXPECT_EQ(reference, Logits(*gguf, tokens, StorageDType::kAuto, CpuKernels::kReference));
  // Quantizing changed the weights.
  EXPECT_NE(reference, Logits(*checkpoint, tokens, StorageDType::kAuto, CpuKernels::kReference));
  std::filesystem::remove_all(base);
  std::filesystem::remove(gguf_path);
}

INSTANTIATE_TEST_SUITE_P(Types, CpuBlockWeightsTest,
                         ::testing::Values(Case{"small-llama", StorageDType::kQ8_0, DType::kQ8_0, "cpu: Q8_0 weights"},
                                           Case{"small-llama", StorageDType::kQ4_K, DType::kQ4_K, "cpu: Q4_K weights"},
                                           Case{"tiny-qwen2", StorageDType::kQ8_0, DType::kQ8_0, "cpu: Q8_0 weights"},
                                           Case{"tiny-qwen2", StorageDType::kQ4_K, DType::kQ4_K, "cpu: F16 weights"}));

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
