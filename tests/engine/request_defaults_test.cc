// generation_config.json parsing (model/generation_config.h) and the request defaults it
// gives (engine/request_defaults.h), against transformers' reading of the same files.
#include "engine/request_defaults.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RequestDefaults DefaultsOf(const std::string& json) {
  auto config = ParseGenerationConfig(json);
  EXPECT_TRUE(config.ok()) << config.status();
  auto defaults = RequestDefaultsFrom(config.ok() ? *config : GenerationConfig());
  EXPECT_TRUE(defaults.ok()) << defaults.status();
  return defaults.ok() ? *defaults : RequestDefaults();
}

absl::Status ErrorOf(const std::string& json) {
  auto config = ParseGenerationConfig(json);
  if (!config.ok()) return config.status();
  return RequestDefaultsFrom(*config).status();
}

TEST(RequestDefaultsTest, WithoutSamplingFieldsTheDefaultsAreKvtiers) {
  // What mkmodel and many checkpoints write: ids only.
  RequestDefaults d = DefaultsOf(R"({"_from_model_config": true, "bos_token_id": 1, "eos_token_id": 2})");
  EXPECT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(d.top_k, 0);
  EXPECT_EQ(d.top_p, 1.0f);
  EXPECT_EQ(d.repetition_penalty, 1.0f);
  EXPECT_EQ(d.max_new_tokens, 16);
  EXPECT_THAT(d.from_generation_config, ElementsAre("eos_token_id"));
}

TEST(RequestDefaultsTest, Llama3SamplesWithTransformersTopK) {
  // Meta-Llama-3-8B-Instruct's generation_config.json.
  RequestDefaults d = DefaultsOf(R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128009],
                                     "max_length": 4096, "temperature": 0.6, "top_p": 0.9,
                                     "transformers_version": "4.40.0.dev0"})");
  EXPECT_FLOAT_EQ(d.temperature, 0.6f);
  EXPECT_EQ(d.top_k, 50);  // GenerationConfig's default, applied by generate() when sampling
  EXPECT_FLOAT_EQ(d.top_p, 0.9f);
  EXPECT_EQ(d.max_new_tokens, 16);  // max_length counts the prompt: not a max_new_tokens
  EXPECT_THAT(d.from_generation_config, ElementsAre("do_sample", "temperature", "top_p", "eos_token_id"));
}

TEST(RequestDefaultsTest, DoSampleWithoutTemperatureIsOne) {
  RequestDefaults d = DefaultsOf(R"({"do_sample": true, "top_k": 20, "repetition_penalty": 1.05,
                                     "max_new_tokens": 300})");
  EXPECT_EQ(d.temperature, 1.0f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_FLOAT_EQ(d.repetition_penalty, 1.05f);
  EXPECT_EQ(d.max_new_tokens, 300);
}

TEST(RequestDefaultsTest, WithoutDoSampleStaysGreedyButKeepsFilters) {
  RequestDefaults d = DefaultsOf(R"({"temperature": 0.7, "top_k": 40, "top_p": 0.8})");
  EXPECT_EQ(d.temperature, 0.0f);  // transformers' generate() is greedy without do_sample
  EXPECT_EQ(d.top_k, 40);
  EXPECT_FLOAT_EQ(d.top_p, 0.8f);
  d = DefaultsOf(R"({"do_sample": false, "temperature": 0.7})");
  EXPECT_EQ(d.temperature, 0.0f);
}

TEST(RequestDefaultsTest, NullsAndUnknownFieldsAreIgnored) {
  RequestDefaults d = DefaultsOf(R"({"temperature": null, "top_k": null, "num_beams": 4, "foo": {"bar": [1]},
                                     "max_new_tokens": 32.0})");
  EXPECT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(d.top_k, 0);
  EXPECT_EQ(d.max_new_tokens, 32);
}

TEST(RequestDefaultsTest, EosIdsIntegerOrList) {
  auto one = ParseGenerationConfig(R"({"eos_token_id": 7})");
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(one->eos_token_ids, ElementsAre(7));
  auto list = ParseGenerationConfig(R"({"eos_token_id": [7, 9]})");
  ASSERT_TRUE(list.ok());
  EXPECT_THAT(list->eos_token_ids, ElementsAre(7, 9));
}

TEST(RequestDefaultsTest, BadValuesNameTheField) {
  struct Case {
    const char* json;
    const char* field;
  } cases[] = {
      {R"({"temperature": "0.6"})", "temperature"},
      {R"({"do_sample": "yes"})", "do_sample"},
      {R"({"top_k": 2.5})", "top_k"},
      {R"({"top_k": -1})", "top_k"},
      {R"({"top_p": 0})", "top_p"},
      {R"({"top_p": 1.5})", "top_p"},
      {R"({"temperature": -1})", "temperature"},
      {R"({"repetition_penalty": 0})", "repetition_penalty"},
      {R"({"max_new_tokens": 0})", "max_new_tokens"},
      {R"({"eos_token_id": "</s>"})", "eos_token_id"},
      {R"({"eos_token_id": [2, -1]})", "eos_token_id"},
  };
  for (const Case& c : cases) {
    absl::Status s = ErrorOf(c.json);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.json << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field)) << c.json;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ErrorOf("[1, 2]")));
  EXPECT_TRUE(absl::IsInvalidArgument(ErrorOf("{")));
}

TEST(RequestDefaultsTest, ExplicitFieldsWin) {
  RequestDefaults d = DefaultsOf(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "max_new_tokens": 64})");
  SamplingParams request;
  request.temperature = 0.0f;  // set explicitly: greedy despite do_sample
  request.max_new_tokens = 16;  // the library default, but not set: the file's wins
  request.seed = 5;
  ExplicitSamplingFields set;
  set.temperature = true;
  SamplingParams p = ApplyRequestDefaults(d, set, request);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_k, 50);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.max_new_tokens, 64);
  EXPECT_EQ(p.seed, 5u);
  set = ExplicitSamplingFields{true, true, true, true, true};
  request.temperature = 0.3f;
  request.top_k = 0;
  request.top_p = 1.0f;
  p = ApplyRequestDefaults(d, set, request);
  EXPECT_EQ(p.temperature, 0.3f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.max_new_tokens, 16);
}

TEST(RequestDefaultsTest, JsonShowsTheDefaultsInForce) {
  auto config = ParseGenerationConfig(R"({"do_sample": true, "temperature": 0.5, "eos_token_id": [3, 4]})");
  ASSERT_TRUE(config.ok());
  auto d = RequestDefaultsFrom(*config);
  ASSERT_TRUE(d.ok());
  nlohmann::ordered_json j = RequestDefaultsJson(*d, *config);
  EXPECT_EQ(j["do_sample"], true);
  EXPECT_EQ(j["temperature"], 0.5);
  EXPECT_EQ(j["top_k"], 50);
  EXPECT_EQ(j["eos_token_ids"], nlohmann::ordered_json({3, 4}));
  EXPECT_EQ(j["from_generation_config"], nlohmann::ordered_json({"do_sample", "temperature", "eos_token_id"}));
}

}  // namespace
}  // namespace kvtier
