// Tests of random-weight checkpoints: determinism across writes and thread counts, seed
// sensitivity, dtype encoding, weight statistics, presets, files written.
#include "model/random_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::ReadBytes;
using ::kvtier::testing::TempDir;
using ::testing::HasSubstr;

TEST(RandomCheckpointTest, SameSeedSameBytesAnyThreadCount) {
  TempDir a, b;
  RandomCheckpointSpec spec;
  spec.dtype = DType::kBF16;
  spec.num_threads = 1;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, a.path()).ok());
  spec.num_threads = 5;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, b.path()).ok());
  for (const char* file : {"model.safetensors", "config.json", "generation_config.json"}) {
    const std::string bytes = ReadBytes(a / file);
    EXPECT_FALSE(bytes.empty()) << file;
    EXPECT_EQ(bytes, ReadBytes(b / file)) << file;
  }
}

TEST(RandomCheckpointTest, DifferentSeedDifferentWeights) {
  TempDir a, b;
  RandomCheckpointSpec spec;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, a.path()).ok());
  spec.seed = 99;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, b.path()).ok());
  EXPECT_NE(ReadBytes(a / "model.safetensors"), ReadBytes(b / "model.safetensors"));
  EXPECT_EQ(ReadBytes(a / "config.json"), ReadBytes(b / "config.json"));
}

TEST(RandomCheckpointTest, StoredDtypeEncodesTheSameValues) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    TempDir dir;
    RandomCheckpointSpec spec;
    spec.dtype = dtype;
    spec.arch = Architecture::kQwen2;
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    for (const std::string& name : {std::string("model.embed_tokens.weight"), std::string("model.layers.0.self_attn.k_proj.bias")}) {
      TensorView t = *(*ckpt)->Tensor(name);
      EXPECT_EQ(t.dtype, dtype);
      for (int64_t i : {int64_t{0}, int64_t{7}, t.num_elements() - 1}) {
        const float v = RandomWeight(spec.seed, name, t.shape, i);
        const float want = dtype == DType::kF32 ? v : dtype == DType::kBF16 ? Bf16ToFloat(FloatToBf16(v))
                                                                             : Fp16ToFloat(FloatToFp16(v));
        EXPECT_EQ(t.ElementAsFloat(i), want) << name << "[" << i << "]";
      }
    }
    const char* torch = dtype == DType::kF32 ? "float32" : dtype == DType::kBF16 ? "bfloat16" : "float16";
    EXPECT_EQ((*ckpt)->config().torch_dtype, torch);
  }
}

TEST(RandomCheckpointTest, WeightStatistics) {
  RandomCheckpointSpec spec;
  const std::vector<int64_t> shape = {128, 64};
  auto stats = [&](const std::string& name, const std::vector<int64_t>& s, int64_t n) {
    double sum = 0, sum2 = 0, lo = 1e9, hi = -1e9;
    for (int64_t i = 0; i < n; ++i) {
      double v = RandomWeight(spec.seed, name, s, i);
      sum += v;
      sum2 += v * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const double mean = sum / n;
    return std::array<double, 4>{mean, std::sqrt(sum2 / n - mean * mean), lo, hi};
  };
  auto w = stats("model.layers.0.mlp.up_proj.weight", shape, 128 * 64);
  EXPECT_NEAR(w[0], 0.0, 0.01);
  EXPECT_NEAR(w[1], 1.0 / std::sqrt(64.0), 0.005);  // std 1/sqrt(fan_in)
  auto norm = stats("model.layers.0.input_layernorm.weight", {64}, 4096);
  EXPECT_NEAR(norm[0], 1.0, 0.02);
  EXPECT_GE(norm[2], 0.8);
  EXPECT_LE(norm[3], 1.2);
  auto bias = stats("model.layers.0.self_attn.q_proj.bias", {64}, 4096);
  EXPECT_GE(bias[2], -0.5);
  EXPECT_LE(bias[3], 0.5);
  EXPECT_GT(bias[1], 0.2);
}

TEST(RandomCheckpointTest, WritesConfigAndGenerationConfig) {
  TempDir dir;
  RandomCheckpointSpec spec;
  spec.arch = Architecture::kQwen3;
  spec.tie_embeddings = true;
  spec.eos_token_ids = {2, 3};
  spec.bos_token_id = std::nullopt;
  spec.rope_theta = 1e6;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  auto config = nlohmann::json::parse(ReadBytes(dir / "config.json"));
  EXPECT_EQ(config["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["tie_word_embeddings"], true);
  EXPECT_EQ(config["eos_token_id"], nlohmann::json({2, 3}));
  auto generation = nlohmann::json::parse(ReadBytes(dir / "generation_config.json"));
  EXPECT_EQ(generation["eos_token_id"], nlohmann::json({2, 3}));
  EXPECT_FALSE(generation.contains("bos_token_id"));
}

TEST(RandomCheckpointTest, ListsTheFilesItWrites) {
  RandomCheckpointSpec spec;
  auto single = RandomCheckpointFiles(spec);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(*single, (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors"}));
  spec.max_shard_bytes = 100000;
  auto sharded = RandomCheckpointFiles(spec);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  std::vector<std::string> written;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    written.push_back(entry.path().filename().string());
  }
  std::sort(written.begin(), written.end());
  std::vector<std::string> listed = *sharded;
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(written, listed);
  EXPECT_GT(listed.size(), 4u);  // several shards and their index
}

TEST(RandomCheckpointTest, RewritingDeletesNothingAndRefusesAShadowingIndex) {
  TempDir dir;
  RandomCheckpointSpec spec;
  spec.max_shard_bytes = 100000;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  const std::string index_text = ReadBytes(dir / "model.safetensors.index.json");
  {
    std::ofstream keep(dir / "README.md");
    keep << "not mkmodel's";
  }
  // A single-file write would be shadowed by the index, which is not its file to delete.
  spec.max_shard_bytes = 0;
  spec.seed = 5;
  const absl::Status refused = WriteRandomCheckpoint(spec, dir.path());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_EQ(ReadBytes(dir / "model.safetensors.index.json"), index_text);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  // The sharded write again replaces its own files and leaves the others alone.
  spec.max_shard_bytes = 100000;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  EXPECT_EQ(ReadBytes(dir / "README.md"), "not mkmodel's");
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
}

TEST(RandomCheckpointTest, InvalidSpecIsInvalidArgument) {
  TempDir dir;
  RandomCheckpointSpec spec;
  spec.kv_heads = 3;
  auto status = WriteRandomCheckpoint(spec, dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("num_key_value_heads"));
  spec.kv_heads = 2;
  spec.eos_token_ids = {100000};
  EXPECT_EQ(WriteRandomCheckpoint(spec, dir.path()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RandomCheckpointTest, Presets) {
  for (const std::string& name : RandomCheckpointPresetNames()) {
    auto spec = RandomCheckpointPreset(name);
    ASSERT_TRUE(spec.ok()) << name;
    auto config = RandomCheckpointConfig(*spec);
    EXPECT_TRUE(config.ok()) << name << ": " << config.status();
  }
  auto l3 = RandomCheckpointPreset("llama3-8b");
  ASSERT_TRUE(l3.ok());
  auto config = RandomCheckpointConfig(*l3);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->NumParameters(), 8030261248);  // the published Llama-3-8B count
  EXPECT_EQ(l3->dtype, DType::kBF16);
  ASSERT_TRUE(config->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(config->rope_theta, 500000.0);
  auto tiny = RandomCheckpointPreset("tiny-llama");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->hidden, 64);
  EXPECT_EQ(tiny->layers, 2);
  EXPECT_EQ(tiny->heads, 4);
  EXPECT_EQ(tiny->kv_heads, 2);
  EXPECT_EQ(tiny->head_dim, 16);
  EXPECT_EQ(tiny->intermediate, 128);
  EXPECT_EQ(tiny->vocab, 512);
  auto unknown = RandomCheckpointPreset("gpt-5");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("gpt-5"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("tiny-llama"));
}

}  // namespace
}  // namespace kvtier
