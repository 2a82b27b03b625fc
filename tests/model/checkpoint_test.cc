// Tests of Checkpoint::Open: each architecture, sharded index, missing pieces, shape and
// dtype checks, and the fingerprint.
#include "model/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_format.h"

#include "model/random_checkpoint.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::ReadBytes;
using ::kvtier::testing::SafetensorsBytes;
using ::kvtier::testing::TempDir;
using ::kvtier::testing::WriteBytes;
using ::testing::HasSubstr;

RandomCheckpointSpec TinySpec(Architecture arch = Architecture::kLlama) {
  RandomCheckpointSpec spec;
  spec.arch = arch;
  spec.num_threads = 2;
  return spec;
}

std::unique_ptr<Checkpoint> MustOpen(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  return ckpt.ok() ? std::move(*ckpt) : nullptr;
}

TEST(CheckpointTest, OpensEveryArchitecture) {
  for (Architecture arch : {Architecture::kLlama, Architecture::kMistral, Architecture::kQwen2, Architecture::kQwen3}) {
    TempDir dir;
    RandomCheckpointSpec spec = TinySpec(arch);
    spec.tie_embeddings = arch == Architecture::kQwen3;
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
    auto ckpt = MustOpen(dir.path());
    ASSERT_NE(ckpt, nullptr);
    const ModelConfig& c = ckpt->config();
    EXPECT_EQ(c.architecture, arch);
    EXPECT_EQ(ckpt->TensorNames().size(), ExpectedTensors(c).size());
    EXPECT_EQ(ckpt->TotalTensorBytes(), c.NumParameters() * 4);
    EXPECT_EQ(ckpt->Has("model.layers.0.self_attn.q_proj.bias"), arch == Architecture::kQwen2);
    EXPECT_FALSE(ckpt->Has("model.layers.0.self_attn.o_proj.bias"));
    EXPECT_EQ(ckpt->Has("model.layers.1.self_attn.k_norm.weight"), arch == Architecture::kQwen3);
    EXPECT_EQ(ckpt->Has("lm_head.weight"), arch != Architecture::kQwen3);
    auto q = ckpt->Tensor("model.layers.1.self_attn.q_proj.weight");
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->shape, (std::vector<int64_t>{c.q_dim(), c.hidden_size}));
    EXPECT_EQ(q->ElementAsFloat(5), RandomWeight(spec.seed, q->name, q->shape, 5));
  }
}

TEST(CheckpointTest, LlamaAttentionBiasIncludesOProj) {
  TempDir dir;
  RandomCheckpointSpec spec = TinySpec();
  spec.attention_bias = true;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  auto ckpt = MustOpen(dir.path());
  ASSERT_NE(ckpt, nullptr);
  EXPECT_TRUE(ckpt->Has("model.layers.0.self_attn.v_proj.bias"));
  EXPECT_TRUE(ckpt->Has("model.layers.0.self_attn.o_proj.bias"));
}

TEST(CheckpointTest, TensorNotFoundNamesIt) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());
  auto ckpt = MustOpen(dir.path());
  ASSERT_NE(ckpt, nullptr);
  auto t = ckpt->Tensor("model.layers.9.mlp.up_proj.weight");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("model.layers.9.mlp.up_proj.weight"));
}

TEST(CheckpointTest, MissingDirectoryConfigOrWeights) {
  TempDir dir;
  auto missing = Checkpoint::Open(dir / "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir / "nope"));

  auto no_config = Checkpoint::Open(dir.path());
  EXPECT_EQ(no_config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_config.status().message(), HasSubstr("config.json"));

  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());
  std::filesystem::remove(dir / "model.safetensors");
  auto no_weights = Checkpoint::Open(dir.path());
  EXPECT_EQ(no_weights.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_weights.status().message(), HasSubstr("model.safetensors"));
}

TEST(CheckpointTest, BadConfigNamesFileAndField) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());
  auto json = nlohmann::json::parse(ReadBytes(dir / "config.json"));
  json["num_key_value_heads"] = 3;
  WriteBytes(dir / "config.json", json.dump());
  auto ckpt = Checkpoint::Open(dir.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("config.json"));
  EXPECT_THAT(ckpt.status().message(), HasSubstr("num_key_value_heads (3)"));

  json["num_key_value_heads"] = 2;
  json["architectures"] = {"PhiForCausalLM"};
  WriteBytes(dir / "config.json", json.dump());
  ckpt = Checkpoint::Open(dir.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("PhiForCausalLM"));
}

TEST(CheckpointTest, ShapeMismatchNamesTensorAndShapes) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());
  auto json = nlohmann::json::parse(ReadBytes(dir / "config.json"));
  json["intermediate_size"] = 96;  // weights were written with 128
  WriteBytes(dir / "config.json", json.dump());
  auto ckpt = Checkpoint::Open(dir.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_THAT(ckpt.status().message(), HasSubstr("shape [128, 64], expected [96, 64]"));
}

TEST(CheckpointTest, MissingRequiredTensorNamed) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());
  auto json = nlohmann::json::parse(ReadBytes(dir / "config.json"));
  json["tie_word_embeddings"] = false;
  json["num_hidden_layers"] = 3;  // layer 2 was never written
  WriteBytes(dir / "config.json", json.dump());
  auto ckpt = Checkpoint::Open(dir.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.layers.2."));
}

TEST(CheckpointTest, TiedConfigIgnoresPresentLmHead) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());  // untied: has lm_head
  auto json = nlohmann::json::parse(ReadBytes(dir / "config.json"));
  json["tie_word_embeddings"] = true;
  WriteBytes(dir / "config.json", json.dump());
  auto ckpt = MustOpen(dir.path());
  ASSERT_NE(ckpt, nullptr);
  EXPECT_TRUE(ckpt->config().tie_word_embeddings);
}

// Rewrites model.safetensors with `name` stored as F64 (same shape) to test dtype checks.
void RewriteAsF64(const std::string& dir, const std::string& name) {
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  nlohmann::ordered_json header;
  std::string data;
  for (const TensorView& t : (*file)->tensors()) {
    const uint64_t begin = data.size();
    if (t.name == name) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        double v = t.ElementAsFloat(i);
        data.append(reinterpret_cast<const char*>(&v), 8);
      }
    } else {
      data.append(reinterpret_cast<const char*>(t.data), t.nbytes());
    }
    header[t.name] = {{"dtype", t.name == name ? "F64" : std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {begin, data.size()}}};
  }
  std::string bytes = SafetensorsBytes(header.dump(), data);
  file->reset();
  WriteBytes(dir + "/model.safetensors", bytes);
}

TEST(CheckpointTest, UnsupportedDtypeOfNeededTensorIsUnimplemented) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());
  RewriteAsF64(dir.path(), "model.norm.weight");
  auto ckpt = Checkpoint::Open(dir.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.norm.weight"));
  EXPECT_THAT(ckpt.status().message(), HasSubstr("F64"));
}

TEST(CheckpointTest, CorruptSafetensorsIsDataLoss) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), dir.path()).ok());
  std::string bytes = ReadBytes(dir / "model.safetensors");
  bytes.resize(bytes.size() - 10);  // truncated download
  WriteBytes(dir / "model.safetensors", bytes);
  auto ckpt = Checkpoint::Open(dir.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.safetensors"));
}

class ShardedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RandomCheckpointSpec spec = TinySpec();
    spec.max_shard_bytes = 64 * 1024;  // tiny-llama is ~600 KB of fp32: ~10 shards
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir_.path()).ok());
    index_ = nlohmann::json::parse(ReadBytes(dir_ / "model.safetensors.index.json"));
  }
  TempDir dir_;
  nlohmann::json index_;
};

TEST_F(ShardedTest, OpensAndMatchesSingleFile) {
  EXPECT_FALSE(std::filesystem::exists(dir_ / "model.safetensors"));
  std::set<std::string> shards;
  for (auto& [name, shard] : index_["weight_map"].items()) shards.insert(shard.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  EXPECT_TRUE(shards.count(absl::StrFormat("model-00001-of-%05d.safetensors", shards.size())));
  auto sharded = MustOpen(dir_.path());
  ASSERT_NE(sharded, nullptr);

  TempDir single_dir;
  ASSERT_TRUE(WriteRandomCheckpoint(TinySpec(), single_dir.path()).ok());
  auto single = MustOpen(single_dir.path());
  ASSERT_NE(single, nullptr);
  ASSERT_EQ(sharded->TensorNames(), single->TensorNames());
  for (const std::string& name : single->TensorNames()) {
    TensorView a = *sharded->Tensor(name);
    TensorView b = *single->Tensor(name);
    ASSERT_EQ(a.shape, b.shape);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << name;
  }
  EXPECT_EQ(sharded->Fingerprint(), single->Fingerprint());  // layout-independent
}

TEST_F(ShardedTest, MissingShardIsNotFoundNamingIt) {
  std::string second;
  for (auto& [name, shard] : index_["weight_map"].items()) {
    if (shard.get<std::string>().rfind("model-00002-of-", 0) == 0) second = shard.get<std::string>();
  }
  ASSERT_FALSE(second.empty());
  ASSERT_TRUE(std::filesystem::remove(dir_ / second));
  auto ckpt = Checkpoint::Open(dir_.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model-00002-of-"));
}

TEST_F(ShardedTest, IndexNamingTensorAbsentFromShardIsDataLoss) {
  index_["weight_map"]["model.layers.0.extra.weight"] = index_["weight_map"]["model.norm.weight"];
  WriteBytes(dir_ / "model.safetensors.index.json", index_.dump());
  auto ckpt = Checkpoint::Open(dir_.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.layers.0.extra.weight"));
}

TEST_F(ShardedTest, IndexWithEscapingShardNameIsDataLoss) {
  index_["weight_map"]["model.norm.weight"] = "../model.safetensors";
  WriteBytes(dir_ / "model.safetensors.index.json", index_.dump());
  EXPECT_EQ(Checkpoint::Open(dir_.path()).status().code(), absl::StatusCode::kDataLoss);
}

TEST(FingerprintTest, StableAcrossOpensAndSensitiveToWeightsAndConfig) {
  TempDir a, b, c;
  RandomCheckpointSpec spec = TinySpec();
  ASSERT_TRUE(WriteRandomCheckpoint(spec, a.path()).ok());
  spec.seed = 2;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, b.path()).ok());
  spec.seed = 1;
  spec.rope_theta = 20000.0;  // same weights, different config
  ASSERT_TRUE(WriteRandomCheckpoint(spec, c.path()).ok());
  auto a1 = MustOpen(a.path());
  auto a2 = MustOpen(a.path());
  auto b1 = MustOpen(b.path());
  auto c1 = MustOpen(c.path());
  ASSERT_TRUE(a1 && a2 && b1 && c1);
  EXPECT_EQ(a1->Fingerprint(), a2->Fingerprint());
  EXPECT_NE(a1->Fingerprint(), b1->Fingerprint());
  EXPECT_NE(a1->Fingerprint(), c1->Fingerprint());
  EXPECT_NE(a1->Fingerprint(), 0u);
}

}  // namespace
}  // namespace kvtier
