// Grammar-constrained generation through the Engine (CPU backend, tiny random model with a
// tokenizer of multi-byte tokens): every finished output is complete JSON of the schema's
// shape, under sampling, greedy decoding, preemption (swap and recompute), stop strings and
// mixed batches; a constrained sequence's tokens do not depend on its neighbours.
#include <cmath>
#include <map>
#include <random>

#include "engine/engine.h"
#include "gmock/gmock.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/test_model.h"
#include "tokenizer/tokenizer.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

constexpr char kWeatherSchema[] = R"({
  "type": "object",
  "properties": {
    "location": {"type": "string", "maxLength": 12},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}
  },
  "required": ["location", "unit"],
  "additionalProperties": false
})";

EngineOptions CpuOptions() {
  EngineOptions options;
  options.backend = "cpu";
  options.num_threads = 2;
  options.block_tokens = 4;
  options.gpu_kv_bytes = 16 << 20;
  return options;
}

struct Fixture {
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
};

Fixture MakeEngine(const EngineOptions& options, bool with_tokenizer = true) {
  const std::string dir = grammar::testing::FragmentModelDir();
  Fixture f;
  if (with_tokenizer) {
    auto tok = tokenizer::Tokenizer::FromDirectory(dir);
    EXPECT_TRUE(tok.ok()) << tok.status();
    f.tokenizer = std::move(*tok);
  }
  auto engine = Engine::Create(testing::OpenCheckpoint(dir), options, f.tokenizer);
  EXPECT_TRUE(engine.ok()) << engine.status();
  f.engine = std::move(*engine);
  return f;
}

std::shared_ptr<const grammar::Grammar> Schema(const char* text) {
  auto g = grammar::JsonSchemaToGrammar(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::make_shared<const grammar::Grammar>(*std::move(g));
}

SamplingParams Sampled(uint64_t seed, std::shared_ptr<const grammar::Grammar> g, int max_new = 200) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.max_new_tokens = max_new;
  p.grammar = std::move(g);
  return p;
}

struct Outcome {
  FinishReason finish = FinishReason::kNone;
  std::string text;
  std::vector<int32_t> tokens;
};

std::map<SequenceId, Outcome> RunToEnd(Engine& engine) {
  std::vector<StepEvent> events;
  for (int i = 0; i < 20000 && engine.NumUnfinished() > 0; ++i) {
    events.clear();
    absl::Status s = engine.Step(&events);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(engine.VerifyIntegrity().ok());
  }
  EXPECT_EQ(engine.NumUnfinished(), 0);
  return {};
}

Outcome Read(Engine& engine, SequenceId id) {
  Outcome o;
  EXPECT_TRUE(engine
                  .ReadSequence(id, [&](const Sequence& seq) {
                    o.finish = seq.finish;
                    o.text = seq.text;
                    o.tokens.assign(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
                  })
                  .ok());
  return o;
}

// The shape kWeatherSchema promises (the corpus test checks with a real validator).
void ExpectWeather(const std::string& text) {
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_TRUE(j.contains("location") && j["location"].is_string()) << text;
  EXPECT_LE(j["location"].get<std::string>().size(), 12u * 4) << text;
  ASSERT_TRUE(j.contains("unit")) << text;
  EXPECT_TRUE(j["unit"] == "celsius" || j["unit"] == "fahrenheit") << text;
  if (j.contains("days")) {
    EXPECT_TRUE(j["days"].is_number_integer() && j["days"] >= 1 && j["days"] <= 14) << text;
  }
  for (const auto& [k, v] : j.items()) EXPECT_TRUE(k == "location" || k == "unit" || k == "days" || k == "tags") << text;
}

std::vector<int32_t> Prompt(uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> p = {256};
  for (int i = 0; i < 6; ++i) p.push_back(static_cast<int32_t>(rng() % 256));
  return p;
}

TEST(EngineGrammarTest, SampledOutputsAreCompleteAndValid) {
  Fixture f = MakeEngine(CpuOptions());
  auto schema = Schema(kWeatherSchema);
  std::vector<SequenceId> ids;
  const uint64_t n = grammar::testing::kSanitized ? 8 : 24;
  for (uint64_t s = 0; s < n; ++s) ids.push_back(*f.engine->Add(Prompt(s), Sampled(s, schema)));
  // Unconstrained neighbours in the same batch.
  SamplingParams free = Sampled(99, nullptr, 30);
  free.ignore_eos = true;
  const SequenceId unconstrained = *f.engine->Add(Prompt(99), free);
  RunToEnd(*f.engine);
  int complete = 0;
  for (SequenceId id : ids) {
    Outcome o = Read(*f.engine, id);
    if (o.finish == FinishReason::kGrammar) {
      ++complete;
      ExpectWeather(o.text);
    } else {
      EXPECT_EQ(o.finish, FinishReason::kLength) << o.text;
    }
  }
  EXPECT_GE(complete, static_cast<int>(n) * 3 / 4);
  EXPECT_EQ(Read(*f.engine, unconstrained).tokens.size(), 30u);
  nlohmann::json stats = f.engine->Stats();
  EXPECT_EQ(stats["grammar"]["compiles"], 1);
  EXPECT_EQ(stats["grammar"]["cache_hits"], static_cast<int64_t>(n) - 1);
  EXPECT_EQ(stats["grammar"]["completed"], complete);
  EXPECT_EQ(stats["grammar"]["failed"], 0);
  EXPECT_GT(stats["grammar"]["masks"].get<int64_t>(), 0);
}

TEST(EngineGrammarTest, TokensDoNotDependOnTheBatch) {
  auto schema = Schema(kWeatherSchema);
  Fixture alone = MakeEngine(CpuOptions());
  const SequenceId a = *alone.engine->Add(Prompt(5), Sampled(5, schema));
  RunToEnd(*alone.engine);
  Fixture crowd = MakeEngine(CpuOptions());
  const uint64_t crowd_size = grammar::testing::kSanitized ? 3 : 8;
  for (uint64_t s = 10; s < 10 + crowd_size; ++s) (void)*crowd.engine->Add(Prompt(s), Sampled(s, s % 2 ? schema : nullptr, 40));
  const SequenceId b = *crowd.engine->Add(Prompt(5), Sampled(5, schema));
  RunToEnd(*crowd.engine);
  EXPECT_EQ(Read(*alone.engine, a).tokens, Read(*crowd.engine, b).tokens);
}

TEST(EngineGrammarTest, GreedyAndGbnf) {
  Fixture f = MakeEngine(CpuOptions());
  auto g = grammar::ParseGbnf("root ::= \"- \" [a-z]{1,8} \"\\n\" (\"- \" [a-z]{1,8} \"\\n\")?\n");
  ASSERT_TRUE(g.ok());
  SamplingParams p;
  p.max_new_tokens = 64;
  p.grammar = std::make_shared<const grammar::Grammar>(*g);
  const SequenceId id = *f.engine->Add(Prompt(1), p);
  RunToEnd(*f.engine);
  Outcome o = Read(*f.engine, id);
  EXPECT_EQ(o.finish, FinishReason::kGrammar) << o.text;
  EXPECT_THAT(o.text, ::testing::MatchesRegex("- [a-z]+\n(- [a-z]+\n)?"));
}

TEST(EngineGrammarTest, PreemptionKeepsTheGrammarState) {
  auto schema = Schema(kWeatherSchema);
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    EngineOptions options = CpuOptions();
    options.preemption = mode;
    options.gpu_kv_bytes = 40 * 4 * 2 * 2 * 2 * 16 * 4;  // a few dozen blocks: sequences get preempted
    options.host_kv_bytes = mode == PreemptionMode::kSwap ? (8 << 20) : 0;
    options.max_tokens_per_step = 64;
    Fixture f = MakeEngine(options);
    std::vector<SequenceId> ids;
    // Not scaled down under the sanitizers: fewer sequences may all fit the budget.
    const uint64_t n = 12;
    for (uint64_t s = 0; s < n; ++s) ids.push_back(*f.engine->Add(Prompt(s), Sampled(s, schema, 120)));
    RunToEnd(*f.engine);
    nlohmann::json stats = f.engine->Stats();
    EXPECT_GT(stats["preemptions"].get<int64_t>(), 0) << "the budget should force preemption";
    for (SequenceId id : ids) {
      Outcome o = Read(*f.engine, id);
      if (o.finish == FinishReason::kGrammar) ExpectWeather(o.text);
      EXPECT_NE(o.finish, FinishReason::kError);
    }
    // The same tokens as without preemption.
    Fixture roomy = MakeEngine(CpuOptions());
    const SequenceId ref = *roomy.engine->Add(Prompt(3), Sampled(3, schema, 120));
    RunToEnd(*roomy.engine);
    EXPECT_EQ(Read(*roomy.engine, ref).tokens, Read(*f.engine, ids[3]).tokens);
  }
}

TEST(EngineGrammarTest, PrefixReuseGivesTheSameOutput) {
  auto schema = Schema(kWeatherSchema);
  Fixture f = MakeEngine(CpuOptions());
  std::vector<int32_t> prompt = Prompt(9);
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>(32 + i));
  const SequenceId first = *f.engine->Add(prompt, Sampled(4, schema));
  RunToEnd(*f.engine);
  const SequenceId second = *f.engine->Add(prompt, Sampled(4, schema));
  RunToEnd(*f.engine);
  EXPECT_GT(f.engine->Stats()["prefix_hit_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(Read(*f.engine, first).tokens, Read(*f.engine, second).tokens);
  EXPECT_EQ(Read(*f.engine, second).finish, Read(*f.engine, first).finish);
}

TEST(EngineGrammarTest, StopStringEndsAnIncompleteOutput) {
  Fixture f = MakeEngine(CpuOptions());
  auto g = grammar::ParseGbnf("root ::= \"ab\" \"c\"{5} \"d\"\n");
  ASSERT_TRUE(g.ok());
  SamplingParams p = Sampled(1, std::make_shared<const grammar::Grammar>(*g), 20);
  p.stop_strings = {"ccc"};
  const SequenceId id = *f.engine->Add(Prompt(1), p);
  RunToEnd(*f.engine);
  Outcome o = Read(*f.engine, id);
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.text, "ab");
}

TEST(EngineGrammarTest, TokenLimitLeavesTheOutputIncomplete) {
  Fixture f = MakeEngine(CpuOptions());
  auto g = grammar::ParseGbnf("root ::= \"x\"{30}\n");
  ASSERT_TRUE(g.ok());
  const SequenceId id = *f.engine->Add(Prompt(1), Sampled(1, std::make_shared<const grammar::Grammar>(*g), 5));
  RunToEnd(*f.engine);
  Outcome o = Read(*f.engine, id);
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_EQ(o.tokens.size(), 5u);
  EXPECT_EQ(o.text, std::string(5, 'x'));  // the only token the grammar allows here is "x"
}

TEST(EngineGrammarTest, EosOnlyOnceComplete) {
  Fixture f = MakeEngine(CpuOptions());
  // Complete after one digit, extendable to three: eos (257) competes once complete.
  auto g = grammar::ParseGbnf("root ::= [0-9]{1,3}\n");
  ASSERT_TRUE(g.ok());
  std::vector<SequenceId> ids;
  for (uint64_t s = 0; s < (grammar::testing::kSanitized ? 6u : 16u); ++s) {
    ids.push_back(*f.engine->Add(Prompt(s), Sampled(s, std::make_shared<const grammar::Grammar>(*g), 10)));
  }
  RunToEnd(*f.engine);
  for (SequenceId id : ids) {
    Outcome o = Read(*f.engine, id);
    EXPECT_EQ(o.finish, FinishReason::kGrammar);
    EXPECT_THAT(o.text, ::testing::MatchesRegex("[0-9]{1,3}"));
  }
}

TEST(EngineGrammarTest, ErrorsAtAdd) {
  Fixture no_tokenizer = MakeEngine(CpuOptions(), /*with_tokenizer=*/false);
  auto id = no_tokenizer.engine->Add(Prompt(1), Sampled(1, Schema(kWeatherSchema)));
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("needs the model's tokenizer"));
  EXPECT_EQ(no_tokenizer.engine->NumUnfinished(), 0);
}

// The sampler chain (penalties, a logit bias, log-probabilities) and parallel completions
// under a grammar: the mask wins over a +100 bias, every completion follows the grammar on
// its own, completion i equals the request run alone with seed + i, and the reported
// log-probabilities are of tokens the grammar allowed (finite).
TEST(EngineGrammarTest, SamplerChainAndParallelCompletionsFollowTheGrammar) {
  auto schema = Schema(kWeatherSchema);
  auto params = [&](uint64_t seed, int32_t n) {
    SamplingParams p = Sampled(seed, schema, 160);
    p.repetition_penalty = 1.2f;
    p.presence_penalty = 0.5f;
    p.logit_bias = {{'#', 100.0f}, {'{', -5.0f}};  // '#' cannot open the JSON; '{' must
    p.logprobs = 3;
    p.n = n;
    return p;
  };
  constexpr int32_t kCompletions = 3;
  Fixture f = MakeEngine(CpuOptions());
  const SequenceId first = *f.engine->Add(Prompt(7), params(7, kCompletions));
  RunToEnd(*f.engine);
  std::vector<Outcome> outcomes;
  for (int32_t i = 0; i < kCompletions; ++i) {
    Outcome o = Read(*f.engine, first + i);
    ASSERT_FALSE(o.tokens.empty());
    EXPECT_EQ(o.text.substr(0, 1), "{") << o.text;
    if (o.finish == FinishReason::kGrammar) {
      ExpectWeather(o.text);
    } else {
      EXPECT_EQ(o.finish, FinishReason::kLength) << o.text;
    }
    ASSERT_TRUE(f.engine
                    ->ReadSequence(first + i,
                                   [&](const Sequence& seq) {
                                     ASSERT_EQ(seq.generated_logprobs.size(), o.tokens.size());
                                     for (size_t t = 0; t < o.tokens.size(); ++t) {
                                       EXPECT_EQ(seq.generated_logprobs[t].token, o.tokens[t]);
                                       EXPECT_TRUE(std::isfinite(seq.generated_logprobs[t].logprob));
                                       EXPECT_LE(seq.generated_logprobs[t].logprob, 0.0f);
                                     }
                                   })
                    .ok());
    outcomes.push_back(std::move(o));
  }
  for (int32_t i : {1, 2}) {
    Fixture alone = MakeEngine(CpuOptions());
    const SequenceId id = *alone.engine->Add(Prompt(7), params(7 + static_cast<uint64_t>(i), 1));
    RunToEnd(*alone.engine);
    EXPECT_EQ(Read(*alone.engine, id).tokens, outcomes[static_cast<size_t>(i)].tokens) << "completion " << i;
  }
  nlohmann::json stats = f.engine->Stats();
  EXPECT_EQ(stats["grammar"]["failed"], 0);
}

}  // namespace
}  // namespace kvtier
