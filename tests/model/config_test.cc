// Tests of config.json parsing/serialisation for each supported architecture.
#include "model/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/checkpoint.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// Shaped like meta-llama/Llama-3.1-8B's config.json.
Json Llama31Json() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// Shaped like Qwen/Qwen2.5-0.5B's config.json.
Json Qwen25Json() {
  return Json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// Shaped like Qwen/Qwen3-0.6B's config.json (head_dim != hidden / heads).
Json Qwen3Json() {
  return Json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_sliding_window": false,
    "vocab_size": 151936})");
}

// Shaped like mistralai/Mistral-7B-v0.1's config.json.
Json MistralJson() {
  return Json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "vocab_size": 32000})");
}

absl::StatusOr<ModelConfig> Parse(const Json& j) { return ParseModelConfig(j.dump()); }

TEST(ConfigTest, ParsesLlama31) {
  auto c = Parse(Llama31Json());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c->rope_scaling->factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling->low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->sliding_window.has_value());
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_THAT(c->eos_token_ids, ::testing::ElementsAre(128001));
  EXPECT_EQ(c->q_dim(), 4096);
  EXPECT_EQ(c->kv_dim(), 1024);
}

TEST(ConfigTest, Llama3EightBillionParameters) {
  auto c = Parse(Llama31Json());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->NumParameters(), 8030261248);  // the published Llama-3-8B count
}

TEST(ConfigTest, NumParametersMatchesExpectedTensors) {
  for (Json j : {Llama31Json(), Qwen25Json(), Qwen3Json(), MistralJson()}) {
    for (bool bias : {false, true}) {
      j["attention_bias"] = bias;
      auto c = Parse(j);
      ASSERT_TRUE(c.ok()) << c.status();
      int64_t sum = 0;
      for (const ExpectedTensor& t : ExpectedTensors(*c)) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        sum += n;
      }
      EXPECT_EQ(c->NumParameters(), sum) << j["architectures"][0];
    }
  }
}

TEST(ConfigTest, RopeScalingLegacyTypeKey) {
  Json j = Llama31Json();
  j["rope_scaling"].erase("rope_type");
  j["rope_scaling"]["type"] = "llama3";
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->rope_scaling.has_value());
}

TEST(ConfigTest, RopeScalingNullOrDefault) {
  Json j = Llama31Json();
  j["rope_scaling"] = nullptr;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->rope_scaling.has_value());
  j["rope_scaling"] = {{"rope_type", "default"}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->rope_scaling.has_value());
  j.erase("rope_scaling");
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->rope_scaling.has_value());
}

TEST(ConfigTest, OtherRopeTypesAreUnimplemented) {
  for (const char* type : {"linear", "dynamic", "yarn", "longrope"}) {
    Json j = Llama31Json();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}};
    auto c = Parse(j);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented) << type;
    EXPECT_THAT(c.status().message(), HasSubstr(type));
  }
}

TEST(ConfigTest, RopeParametersFormV5) {
  Json j = Llama31Json();
  Json params = j["rope_scaling"];
  params["rope_theta"] = 250000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = params;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 250000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c->rope_scaling->factor, 8.0);

  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1234.0}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1234.0);
  EXPECT_FALSE(c->rope_scaling.has_value());
}

TEST(ConfigTest, BadLlama3Scaling) {
  Json j = Llama31Json();
  j["rope_scaling"].erase("factor");
  auto c = Parse(j);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("factor"));
  j = Llama31Json();
  j["rope_scaling"]["high_freq_factor"] = 0.5;
  c = Parse(j);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("high_freq_factor 0.5"));
}

TEST(ConfigTest, ParsesMistral) {
  auto c = Parse(MistralJson());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMistral);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->bos_token_id, 1);
  Json j = MistralJson();
  j["sliding_window"] = nullptr;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->sliding_window.has_value());
}

TEST(ConfigTest, ParsesQwen2) {
  auto c = Parse(Qwen25Json());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen2);
  EXPECT_TRUE(c->attention_bias);  // implied by the architecture
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->sliding_window.has_value());  // use_sliding_window false
  EXPECT_EQ(c->head_dim, 64);
  Json j = Qwen25Json();
  j["use_sliding_window"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 32768);
}

TEST(ConfigTest, ParsesQwen3) {
  auto c = Parse(Qwen3Json());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->q_dim(), 2048);
  EXPECT_EQ(c->bos_token_id, 151643);
  EXPECT_THAT(c->eos_token_ids, ::testing::ElementsAre(151645));
  Json j = Qwen3Json();
  j["attention_bias"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->attention_bias);
}

TEST(ConfigTest, EosListAndDefaults) {
  Json j = Llama31Json();
  j["eos_token_id"] = {128001, 128008, 128009};
  j.erase("bos_token_id");
  j.erase("num_key_value_heads");
  j.erase("max_position_embeddings");
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ::testing::ElementsAre(128001, 128008, 128009));
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_EQ(c->num_kv_heads, 32);
  EXPECT_EQ(c->max_position_embeddings, 2048);
}

TEST(ConfigTest, ArchitectureFromModelTypeWhenNoArchitectures) {
  Json j = Qwen3Json();
  j.erase("architectures");
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3);
}

TEST(ConfigTest, UnsupportedArchitectureNamed) {
  Json j = Llama31Json();
  j["architectures"] = {"GPT2LMHeadModel"};
  auto c = Parse(j);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(c.status().message(), HasSubstr("GPT2LMHeadModel"));
}

struct BadCase {
  const char* label;
  std::function<void(Json&)> mutate;
  const char* expect_in_message;
};

TEST(ConfigTest, BadFieldsAreInvalidArgumentNamingTheField) {
  const BadCase cases[] = {
      {"missing hidden_size", [](Json& j) { j.erase("hidden_size"); }, "hidden_size"},
      {"zero layers", [](Json& j) { j["num_hidden_layers"] = 0; }, "num_hidden_layers"},
      {"negative heads", [](Json& j) { j["num_attention_heads"] = -4; }, "num_attention_heads"},
      {"zero kv heads", [](Json& j) { j["num_key_value_heads"] = 0; }, "num_key_value_heads"},
      {"heads % kv", [](Json& j) { j["num_key_value_heads"] = 5; }, "multiple of num_key_value_heads (5)"},
      {"hidden % heads", [](Json& j) { j["hidden_size"] = 4095; }, "hidden_size (4095)"},
      {"bad head_dim", [](Json& j) { j["head_dim"] = 0; }, "head_dim"},
      {"odd head_dim", [](Json& j) { j["head_dim"] = 127; }, "head_dim"},
      {"missing intermediate", [](Json& j) { j.erase("intermediate_size"); }, "intermediate_size"},
      {"missing vocab", [](Json& j) { j.erase("vocab_size"); }, "vocab_size"},
      {"string int", [](Json& j) { j["hidden_size"] = "4096"; }, "hidden_size"},
      {"fractional int", [](Json& j) { j["hidden_size"] = 4096.5; }, "hidden_size"},
      {"max positions", [](Json& j) { j["max_position_embeddings"] = -1; }, "max_position_embeddings"},
      {"eps", [](Json& j) { j["rms_norm_eps"] = -1e-5; }, "rms_norm_eps"},
      {"theta", [](Json& j) { j["rope_theta"] = 0; }, "rope_theta"},
      {"theta type", [](Json& j) { j["rope_theta"] = "big"; }, "rope_theta"},
      {"tie type", [](Json& j) { j["tie_word_embeddings"] = "yes"; }, "tie_word_embeddings"},
      {"eos type", [](Json& j) { j["eos_token_id"] = "</s>"; }, "eos_token_id"},
      {"eos list type", [](Json& j) { j["eos_token_id"] = {1, "x"}; }, "eos_token_id"},
      {"eos range", [](Json& j) { j["eos_token_id"] = 200000; }, "200000"},
      {"bos negative", [](Json& j) { j["bos_token_id"] = -3; }, "-3"},
      {"rope_scaling type", [](Json& j) { j["rope_scaling"] = 8; }, "rope_scaling"},
      {"architectures empty", [](Json& j) { j["architectures"] = Json::array(); }, "architectures"},
      {"no architecture", [](Json& j) { j.erase("architectures"); j.erase("model_type"); }, "architectures"},
      {"not an object", [](Json& j) { j = Json::array({1, 2}); }, "not a JSON object"},
  };
  for (const BadCase& bad : cases) {
    Json j = Llama31Json();
    bad.mutate(j);
    auto c = Parse(j);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad.label << ": " << c.status();
    EXPECT_THAT(c.status().message(), HasSubstr(bad.expect_in_message)) << bad.label;
  }
  Json mistral = MistralJson();
  mistral["sliding_window"] = 0;
  EXPECT_EQ(Parse(mistral).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, InvalidJson) {
  auto c = ParseModelConfig("{\"hidden_size\": ");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("not valid JSON"));
}

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
  ASSERT_EQ(a.rope_scaling.has_value(), b.rope_scaling.has_value());
  if (a.rope_scaling) {
    EXPECT_DOUBLE_EQ(a.rope_scaling->factor, b.rope_scaling->factor);
    EXPECT_DOUBLE_EQ(a.rope_scaling->low_freq_factor, b.rope_scaling->low_freq_factor);
    EXPECT_DOUBLE_EQ(a.rope_scaling->high_freq_factor, b.rope_scaling->high_freq_factor);
    EXPECT_EQ(a.rope_scaling->original_max_position_embeddings, b.rope_scaling->original_max_position_embeddings);
  }
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
}

TEST(ConfigTest, ToJsonRoundTripsEveryArchitecture) {
  for (const Json& j : {Llama31Json(), Qwen25Json(), Qwen3Json(), MistralJson()}) {
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status();
    std::string text = ModelConfigToJson(*c);
    auto back = ParseModelConfig(text);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
    ExpectSameConfig(*c, *back);
  }
}

TEST(ConfigTest, ToJsonHasTheFieldsTransformersReads) {
  struct Want {
    Json config;
    const char* model_type;
  };
  for (const Want& want : {Want{Llama31Json(), "llama"}, Want{Qwen25Json(), "qwen2"}, Want{Qwen3Json(), "qwen3"},
                           Want{MistralJson(), "mistral"}}) {
    auto c = Parse(want.config);
    ASSERT_TRUE(c.ok()) << c.status();
    Json out = Json::parse(ModelConfigToJson(*c));
    EXPECT_EQ(out["model_type"], want.model_type);
    EXPECT_EQ(out["architectures"][0], want.config["architectures"][0]);
    EXPECT_EQ(out["hidden_act"], "silu");
    EXPECT_EQ(out["head_dim"], c->head_dim);
    EXPECT_EQ(out["rope_theta"], c->rope_theta);
    EXPECT_EQ(out["rope_parameters"]["rope_theta"], c->rope_theta);
    EXPECT_TRUE(out.contains("use_cache"));
    const bool windowed = c->architecture != Architecture::kLlama;
    EXPECT_EQ(out.contains("sliding_window"), windowed);
    const bool has_bias_field = c->architecture == Architecture::kLlama || c->architecture == Architecture::kQwen3;
    EXPECT_EQ(out.contains("attention_bias"), has_bias_field);
  }
  auto llama = Parse(Llama31Json());
  Json out = Json::parse(ModelConfigToJson(*llama));
  EXPECT_EQ(out["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(out["rope_parameters"]["rope_type"], "llama3");
  EXPECT_EQ(out["rope_parameters"]["original_max_position_embeddings"], 8192);
  auto qwen3 = Parse(Qwen3Json());
  out = Json::parse(ModelConfigToJson(*qwen3));
  EXPECT_TRUE(out["rope_scaling"].is_null());
  EXPECT_EQ(out["rope_parameters"]["rope_type"], "default");
  EXPECT_EQ(out["use_sliding_window"], false);
}

TEST(ConfigTest, ArchitectureNames) {
  EXPECT_EQ(ArchitectureName(Architecture::kLlama), "LlamaForCausalLM");
  EXPECT_EQ(ArchitectureName(Architecture::kMistral), "MistralForCausalLM");
  EXPECT_EQ(ArchitectureName(Architecture::kQwen2), "Qwen2ForCausalLM");
  EXPECT_EQ(ArchitectureName(Architecture::kQwen3), "Qwen3ForCausalLM");
}

}  // namespace
}  // namespace kvtier
