// Tests of config.json parsing/serialisation for Gemma 2, Gemma 3 and Phi-3, and of the
// sliding windows of Mistral, Mixtral and Qwen.
#include <cmath>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/random_checkpoint.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kvtier {
namespace {

using ::kvtier::testing::ExpectedTensorParameters;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Shaped like google/gemma-2-2b's config.json.
Json Gemma2Json() {
  return Json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 107], "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
    "initializer_range": 0.02, "intermediate_size": 9216, "max_position_embeddings": 8192,
    "model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "torch_dtype": "float32", "use_cache": true, "vocab_size": 256000})");
}

// Shaped like google/gemma-3-1b-it's config.json.
Json Gemma3Json() {
  return Json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 262144})");
}

// Shaped like microsoft/Phi-3.5-mini-instruct's config.json (factors shortened to a pattern).
Json Phi35Json() {
  return Json::parse(R"({
    "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "bos_token_id": 1,
    "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0, 9.5, 10.0, 10.5, 11.0, 11.5, 12.0, 12.5, 13.0, 13.5, 14.0, 14.5, 15.0, 15.5, 16.0, 16.5, 17.0, 17.5, 18.0, 18.5, 19.0, 19.5, 20.0, 20.5, 21.0, 21.5, 22.0, 22.5, 23.0, 23.5, 24.0, 24.5], "short_factor": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], "type": "longrope"},
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32064})");
}

absl::StatusOr<ModelConfig> ParseFamily(const Json& j) { return ParseModelConfig(j.dump()); }

TEST(ConfigFamiliesTest, ParsesGemma2) {
  auto c = ParseFamily(Gemma2Json());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGemma2);
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_TRUE(c->gemma.norm_plus_one && c->gemma.sandwich_norms && c->gemma.scale_embeddings);
  EXPECT_FALSE(c->qk_norm || c->fused_projections);
  EXPECT_TRUE(c->tie_word_embeddings);  // Gemma2Config's default
  EXPECT_EQ(c->attn_logit_softcap, 50.0);
  EXPECT_EQ(c->final_logit_softcap, 30.0);
  EXPECT_DOUBLE_EQ(c->AttentionScale(), 1.0 / 16);
  EXPECT_EQ(c->LayerWindow(0), 4096);  // even layers slide, odd ones attend fully
  EXPECT_EQ(c->LayerWindow(1), std::nullopt);
  EXPECT_EQ(c->LayerWindow(24), 4096);
  EXPECT_EQ(c->LayerWindow(25), std::nullopt);
  EXPECT_EQ(c->NumParameters(), 2614341888);  // the published Gemma-2-2B count
  EXPECT_EQ(c->NumParameters(), ExpectedTensorParameters(*c));
}

TEST(ConfigFamiliesTest, Gemma2DefaultsAndNulls) {
  Json j = Gemma2Json();
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
                          "sliding_window", "head_dim", "hidden_activation", "hidden_act"}) {
    j.erase(key);
  }
  auto c = ParseFamily(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcap, 50.0);
  EXPECT_EQ(c->final_logit_softcap, 30.0);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["sliding_window"] = nullptr;
  c = ParseFamily(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcap, std::nullopt);
  EXPECT_EQ(c->final_logit_softcap, std::nullopt);
  EXPECT_EQ(c->LayerWindow(0), std::nullopt);
}

TEST(ConfigFamiliesTest, ParsesGemma3) {
  auto c = ParseFamily(Gemma3Json());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGemma3);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->attn_logit_softcap, std::nullopt);
  EXPECT_EQ(c->final_logit_softcap, std::nullopt);
  for (int64_t layer = 0; layer < 26; ++layer) {  // every sixth layer attends fully
    const bool full = (layer + 1) % 6 == 0;
    EXPECT_EQ(c->LayerWindow(layer), full ? std::nullopt : std::optional<int64_t>(512)) << layer;
    EXPECT_EQ(c->LayerRopeTheta(layer), full ? 1e6 : 1e4) << layer;
  }
  EXPECT_EQ(c->NumParameters(), 999885952);  // the published Gemma-3-1B count
  EXPECT_EQ(c->NumParameters(), ExpectedTensorParameters(*c));
}

TEST(ConfigFamiliesTest, Gemma3LayerTypesAndRopeParameters) {
  Json j = Gemma3Json();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  j.erase("rope_theta");
  j.erase("rope_local_base_freq");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 500000.0}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}};
  auto c = ParseFamily(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->LayerWindow(0), std::nullopt);
  EXPECT_EQ(c->LayerWindow(1), 512);
  EXPECT_EQ(c->LayerRopeTheta(0), 500000.0);
  EXPECT_EQ(c->LayerRopeTheta(1), 20000.0);

  j["layer_types"] = {"full_attention", "chunked_attention", "full_attention"};
  EXPECT_THAT(ParseFamily(j).status().message(), HasSubstr("layer_types"));
  j["layer_types"] = {"full_attention"};
  EXPECT_THAT(ParseFamily(j).status().message(), HasSubstr("num_hidden_layers"));
}

TEST(ConfigFamiliesTest, ParsesPhi35LongRope) {
  auto c = ParseFamily(Phi35Json());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kPhi3);
  EXPECT_TRUE(c->fused_projections);
  EXPECT_FALSE(c->gemma.norm_plus_one || c->gemma.sandwich_norms || c->gemma.scale_embeddings || c->qk_norm);
  ASSERT_TRUE(c->long_rope.has_value());
  EXPECT_EQ(c->long_rope->original_max_position_embeddings, 4096);
  EXPECT_EQ(c->long_rope->short_factor.size(), 48u);
  EXPECT_EQ(c->long_rope->long_factor[2], 2.0);
  EXPECT_DOUBLE_EQ(c->long_rope->attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)));
  EXPECT_EQ(c->LayerWindow(31), 262144);
  EXPECT_EQ(c->NumParameters(), 3821079552);  // the published Phi-3.5-mini count
  EXPECT_EQ(c->NumParameters(), ExpectedTensorParameters(*c));
}

TEST(ConfigFamiliesTest, Phi3RefusesWhatItCannotRun) {
  Json j = Phi35Json();
  j["rope_scaling"]["long_factor"] = {1.0, 2.0};
  EXPECT_EQ(ParseFamily(j).status().code(), absl::StatusCode::kInvalidArgument);
  j = Phi35Json();
  j["rope_scaling"]["type"] = "su";  // the older name
  EXPECT_TRUE(ParseFamily(j).ok());
  j["rope_scaling"]["type"] = "yarn";
  EXPECT_EQ(ParseFamily(j).status().code(), absl::StatusCode::kUnimplemented);
  j = Phi35Json();
  j["partial_rotary_factor"] = 0.75;
  EXPECT_THAT(ParseFamily(j).status().message(), HasSubstr("partial_rotary_factor"));
  j = Phi35Json();
  j["hidden_act"] = "gelu";
  EXPECT_THAT(ParseFamily(j).status().message(), HasSubstr("unsupported activation 'gelu'"));
}

// Gemma 3 4B and larger scale the full layers' RoPE linearly, in either config form.
TEST(ConfigFamiliesTest, Gemma3LinearRopeScaling) {
  Json j = Gemma3Json();
  j["rope_scaling"] = {{"factor", 8.0}, {"rope_type", "linear"}};
  auto c = ParseFamily(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gemma3_rope.linear_factor, 8.0);
  EXPECT_FALSE(c->rope_scaling.has_value());
  auto again = ParseModelConfig(ModelConfigToJson(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->gemma3_rope.linear_factor, 8.0);
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  c = ParseFamily(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gemma3_rope.linear_factor, 4.0);
  j["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  EXPECT_EQ(ParseFamily(j).status().code(), absl::StatusCode::kUnimplemented);
  j = Gemma3Json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}};
  EXPECT_EQ(ParseFamily(j).status().code(), absl::StatusCode::kUnimplemented);
}

// Every family preset's config.json reads back as the config it was written from.
TEST(ConfigFamiliesTest, PresetsRoundTrip) {
  for (const char* preset : {"tiny-gemma2", "tiny-gemma3", "tiny-phi3", "gemma2-2b", "gemma3-1b", "phi3.5-mini"}) {
    SCOPED_TRACE(preset);
    auto spec = RandomCheckpointPreset(preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto c = RandomCheckpointConfig(*spec);
    ASSERT_TRUE(c.ok()) << c.status();
    auto again = ParseModelConfig(ModelConfigToJson(*c));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->sliding_layers, c->sliding_layers);
    EXPECT_EQ(again->sliding_window, spec->sliding_window);
    EXPECT_EQ(again->attn_logit_softcap, c->attn_logit_softcap);
    EXPECT_EQ(again->final_logit_softcap, c->final_logit_softcap);
    EXPECT_EQ(again->query_pre_attn_scalar, c->query_pre_attn_scalar);
    EXPECT_EQ(again->gemma3_rope.local_theta, c->gemma3_rope.local_theta);
    EXPECT_EQ(again->long_rope.has_value(), spec->longrope_original_max_positions.has_value());
    if (again->long_rope) {
      EXPECT_EQ(again->long_rope->long_factor, c->long_rope->long_factor);
    }
    EXPECT_EQ(again->NumParameters(), ExpectedTensorParameters(*again));
  }
  auto gemma3 = RandomCheckpointConfig(*RandomCheckpointPreset("gemma3-1b"));
  ASSERT_TRUE(gemma3.ok());
  EXPECT_EQ(gemma3->NumParameters(), 999885952);
}

// Shaped like mistralai/Mistral-7B-v0.1's config.json (layers cut to 4).
Json MistralFamilyJson() {
  return Json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 4, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000})");
}

// transformers' rules: Mistral slides every layer (window 4096 when the key is absent,
// none when null); Mixtral likewise (no window by default); Qwen only with
// use_sliding_window, from max_window_layers on; layer_types overrides them.
TEST(ConfigFamiliesTest, SlidingWindowsOfMistralMixtralAndQwen) {
  Json j = MistralFamilyJson();
  auto c = ParseFamily(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_layers, std::vector<bool>(4, true));
  EXPECT_EQ(c->LayerWindow(3), 4096);
  j.erase("sliding_window");
  EXPECT_EQ(ParseFamily(j)->LayerWindow(0), 4096);
  j["sliding_window"] = nullptr;
  EXPECT_TRUE(ParseFamily(j)->sliding_layers.empty());
  EXPECT_EQ(ParseFamily(j)->LayerWindow(0), std::nullopt);

  j = MistralFamilyJson();
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  j["num_local_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  EXPECT_EQ(ParseFamily(j)->sliding_layers, std::vector<bool>(4, true));
  j.erase("sliding_window");
  EXPECT_TRUE(ParseFamily(j)->sliding_layers.empty());

  j = MistralFamilyJson();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  EXPECT_TRUE(ParseFamily(j)->sliding_layers.empty());  // use_sliding_window absent: false
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 2;
  EXPECT_EQ(ParseFamily(j)->sliding_layers, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(ParseFamily(j)->LayerWindow(1), std::nullopt);
  EXPECT_EQ(ParseFamily(j)->LayerWindow(2), 4096);
  j.erase("max_window_layers");  // Qwen's default 28: no layer of 4
  EXPECT_EQ(ParseFamily(j)->sliding_layers, std::vector<bool>(4, false));
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  auto listed = ParseFamily(j);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->sliding_layers, (std::vector<bool>{true, false, true, false}));
  // Written back, the layers that slide read the same.
  auto again = ParseModelConfig(ModelConfigToJson(*listed));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->sliding_layers, listed->sliding_layers);
  EXPECT_EQ(again->sliding_window, 4096);
  j.erase("layer_types");
  j["max_window_layers"] = -1;
  EXPECT_EQ(ParseFamily(j).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ParseFamily(j).status().message(), HasSubstr("max_window_layers"));
}

// A random Mistral, Mixtral or Qwen checkpoint with a window slides every layer, and its
// config.json says so to transformers.
TEST(ConfigFamiliesTest, RandomCheckpointWindowsRoundTrip) {
  for (const char* preset : {"tiny-mistral", "tiny-mixtral", "tiny-qwen2", "tiny-qwen3", "tiny-qwen3moe"}) {
    SCOPED_TRACE(preset);
    RandomCheckpointSpec spec = *RandomCheckpointPreset(preset);
    spec.sliding_window = 8;
    auto c = RandomCheckpointConfig(spec);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->sliding_layers, std::vector<bool>(static_cast<size_t>(spec.layers), true));
    auto again = ParseModelConfig(ModelConfigToJson(*c));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->sliding_layers, c->sliding_layers);
    EXPECT_EQ(again->sliding_window, 8);
  }
}

}  // namespace
}  // namespace kvtier
