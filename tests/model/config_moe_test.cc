// Tests of config.json parsing/serialisation for Mixtral and Qwen3-MoE, and of their
// checkpoints' tensors: what a bad config or a missing expert is told.
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/config_features.h"
#include "model/random_checkpoint.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::ExpectedTensorParameters;
using ::kvtier::testing::TempDir;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Shaped like mistralai/Mixtral-8x7B-v0.1's config.json.
Json MixtralJson() {
  return Json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000})");
}

// Shaped like Qwen/Qwen3-30B-A3B's config.json.
Json Qwen3MoeJson() {
  return Json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

absl::StatusOr<ModelConfig> ParseMoe(const Json& j) { return ParseModelConfig(j.dump()); }

TEST(ConfigMoeTest, ParsesMixtral) {
  auto c = ParseMoe(MixtralJson());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMixtral);
  EXPECT_EQ(c->moe.num_experts, 8);
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->moe.expert_intermediate_size, 14336);
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.sparse_layers, std::vector<bool>(32, true));
  EXPECT_FALSE(c->qk_norm || c->attention_bias);
  EXPECT_EQ(c->NumParameters(), ExpectedTensorParameters(*c));
  EXPECT_EQ(c->NumParameters(), 46702792704);  // Mixtral-8x7B's 46.7B
  // The names the Hub checkpoints use.
  std::vector<std::string> names;
  for (const ExpectedTensor& t : ExpectedTensors(*c)) names.push_back(t.name);
  EXPECT_THAT(names, ::testing::Contains("model.layers.0.block_sparse_moe.gate.weight"));
  EXPECT_THAT(names, ::testing::Contains("model.layers.31.block_sparse_moe.experts.7.w2.weight"));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("model.layers.0.mlp.gate_proj.weight")));
}

TEST(ConfigMoeTest, ParsesQwen3MoeAndItsDenseLayers) {
  auto c = ParseMoe(Qwen3MoeJson());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(c->moe.num_experts, 128);
  EXPECT_EQ(c->moe.top_k, 8);
  EXPECT_EQ(c->moe.expert_intermediate_size, 768);
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->NumParameters(), ExpectedTensorParameters(*c));
  EXPECT_EQ(c->NumParameters(), 30532122624);  // Qwen3-30B-A3B's 30.5B

  Json j = Qwen3MoeJson();
  j["num_hidden_layers"] = 6;
  j["mlp_only_layers"] = {0, 5};
  j["decoder_sparse_step"] = 2;
  j.erase("norm_topk_prob");  // Qwen3MoeConfig's default: not renormalized
  c = ParseMoe(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->moe.sparse_layers, (std::vector<bool>{false, true, false, true, false, false}));
  EXPECT_FALSE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->NumParameters(), ExpectedTensorParameters(*c));
  std::vector<std::string> names;
  for (const ExpectedTensor& t : ExpectedTensors(*c)) names.push_back(t.name);
  EXPECT_THAT(names, ::testing::Contains("model.layers.0.mlp.gate_proj.weight"));  // dense, 6144 wide
  EXPECT_THAT(names, ::testing::Contains("model.layers.1.mlp.gate.weight"));
  EXPECT_THAT(names, ::testing::Contains("model.layers.3.mlp.experts.127.down_proj.weight"));
}

TEST(ConfigMoeTest, RefusesBadExpertFields) {
  Json j = MixtralJson();
  j["num_experts_per_tok"] = 9;
  auto c = ParseMoe(j);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("'num_experts_per_tok' (9) exceeds the number of experts"));
  j = MixtralJson();
  j["num_local_experts"] = 0;
  EXPECT_THAT(ParseMoe(j).status().message(), HasSubstr("'num_local_experts' must be positive"));
  j = Qwen3MoeJson();
  j["num_experts_per_tok"] = 0;
  EXPECT_THAT(ParseMoe(j).status().message(), HasSubstr("'num_experts_per_tok' must be positive"));
  j = Qwen3MoeJson();
  j["mlp_only_layers"] = {48};
  EXPECT_THAT(ParseMoe(j).status().message(), HasSubstr("'mlp_only_layers' entry 48 is not a layer index"));
  j = Qwen3MoeJson();
  j["decoder_sparse_step"] = 0;
  EXPECT_THAT(ParseMoe(j).status().message(), HasSubstr("'decoder_sparse_step' must be positive"));
  j = Qwen3MoeJson();
  j["hidden_act"] = "gelu";
  EXPECT_EQ(ParseMoe(j).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ConfigMoeTest, PresetsRoundTrip) {
  for (const char* preset : {"tiny-mixtral", "tiny-qwen3moe", "mixtral-8x7b", "qwen3-30b-a3b"}) {
    SCOPED_TRACE(preset);
    auto spec = RandomCheckpointPreset(preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->moe.dense_layers = {0};
    auto c = RandomCheckpointConfig(*spec);
    ASSERT_TRUE(c.ok()) << c.status();
    const bool mixtral = spec->arch == Architecture::kMixtral;
    EXPECT_EQ(c->moe.sparse_layers[0], mixtral);  // Mixtral has no dense layers
    auto again = ParseModelConfig(ModelConfigToJson(*c));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->moe.num_experts, c->moe.num_experts);
    EXPECT_EQ(again->moe.top_k, c->moe.top_k);
    EXPECT_EQ(again->moe.expert_intermediate_size, c->moe.expert_intermediate_size);
    EXPECT_EQ(again->moe.norm_topk_prob, c->moe.norm_topk_prob);
    EXPECT_EQ(again->moe.sparse_layers, c->moe.sparse_layers);
    EXPECT_EQ(again->NumParameters(), ExpectedTensorParameters(*again));
  }
}

// The active parameters as model cards count them (embeddings whole, top-k experts):
// Mixtral-8x7B 12.9 B of 46.7 B, Qwen3-30B-A3B 3.35 B of 30.5 B.
TEST(ConfigMoeTest, ActiveParametersAreTheTopKExperts) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> presets[] = {
      {"mixtral-8x7b", {46702792704, 12879925248}}, {"qwen3-30b-a3b", {30532122624, 3353032704}}};
  for (const auto& [preset, counts] : presets) {
    SCOPED_TRACE(preset);
    auto c = RandomCheckpointConfig(*RandomCheckpointPreset(preset));
    ASSERT_TRUE(c.ok()) << c.status();
    nlohmann::ordered_json features;
    AddModelFeaturesJson(*c, &features);
    EXPECT_EQ(c->NumParameters(), counts.first);
    EXPECT_EQ(features["experts"]["active_parameters"].get<int64_t>(), counts.second);
  }
}

// A config naming more experts than the weights hold is refused naming the tensor; so is
// one that makes a dense layer sparse (its router and experts are missing).
TEST(ConfigMoeTest, CheckpointNamesTheMissingExperts) {
  TempDir dir;
  RandomCheckpointSpec spec = *RandomCheckpointPreset("tiny-qwen3moe");
  spec.num_threads = 2;
  spec.moe.dense_layers = {1};
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  ASSERT_TRUE(Checkpoint::Open(dir.path()).ok());
  const Json written = Json::parse(std::ifstream(dir.path() + "/config.json"));

  Json config = written;
  config["num_experts"] = spec.moe.experts + 1;
  std::ofstream(dir.path() + "/config.json") << config.dump();
  auto opened = Checkpoint::Open(dir.path());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(opened.status().message(), HasSubstr("tensor 'model.layers.0.mlp.gate.weight' has shape [4, 64], "
                                                   "expected [5, 64]"));

  config = written;
  config["mlp_only_layers"] = Json::array();
  std::ofstream(dir.path() + "/config.json") << config.dump();
  opened = Checkpoint::Open(dir.path());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(opened.status().message(),
              HasSubstr("tensor 'model.layers.1.mlp.gate.weight' required by Qwen3MoeForCausalLM is missing"));
}

}  // namespace
}  // namespace kvtier
