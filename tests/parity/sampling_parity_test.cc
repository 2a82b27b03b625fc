// The sampler chain and log-probabilities against HuggingFace transformers on the golden
// checkpoints (goldens "sampling", scripts/make_goldens.py), on the CPU backend: each
// processor case's scores and sampling distribution; log-softmax; the prompt's
// log-probabilities and loss through the engine and through `kvtier perplexity` (within
// 1e-4); the greedy tokens' log-probabilities against compute_transition_scores; a greedy
// decode under the repetition penalty, token for token. (The GPU kernels are checked
// against the same goldens in tests/backend_cuda/sampler_chain_test.cc.)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

#include "backend/logprobs.h"
#include "backend/sampler_chain.h"
#include "engine/engine.h"
#include "engine/token_history.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "parity_goldens.h"
#include "testing/test_model.h"

namespace kvtier {
namespace {

struct EngineRun {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;
};

EngineRun Generate(Engine& engine, const std::vector<int32_t>& prompt, const SamplingParams& params) {
  EngineRun run;
  auto id = engine.Add(prompt, params);
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return run;
  std::vector<StepEvent> events;
  while (engine.NumUnfinished() > 0) EXPECT_TRUE(engine.Step(&events).ok());
  EXPECT_TRUE(engine.ReadSequence(*id, [&](const Sequence& s) {
    run.tokens.assign(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
    run.logprobs = s.generated_logprobs;
    run.prompt_logprobs = s.prompt_logprobs;
  }).ok());
  return run;
}

class SamplingParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SamplingParityTest, MatchesTransformers) {
  const nlohmann::json* golden = nullptr;
  std::shared_ptr<const Checkpoint> checkpoint;
  ASSERT_NO_FATAL_FAILURE(parity::OpenGoldenModel(GetParam(), &golden, &checkpoint));
  const nlohmann::json& model = *golden;
  EngineOptions options;
  options.backend = "cpu-reference";  // the oracle: the default BF16 kernel rounds activations
  options.block_tokens = 8;
  options.max_tokens_per_step = 16;  // prompts are scored in chunks
  auto engine = Engine::Create(checkpoint, options);
  ASSERT_TRUE(engine.ok()) << engine.status();

  for (const nlohmann::json& c : model["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    SCOPED_TRACE("prompt of " + std::to_string(prompt.size()) + " tokens");
    ASSERT_TRUE(c.contains("sampling")) << "goldens without sampling cases: run scripts/make_goldens.py";
    const nlohmann::json& golden = c["sampling"];
    std::vector<float> logits;
    for (double v : c["last_logits"]) logits.push_back(static_cast<float>(v));
    const int vocab = static_cast<int>(logits.size());

    // Log-softmax of the raw logits.
    const double lse = LogSumExp(logits);
    for (int i = 0; i < vocab; ++i) {
      EXPECT_NEAR(LogprobOf(logits, i, lse), golden["log_softmax"][static_cast<size_t>(i)].get<double>(), 2e-6);
    }

    // Processors: the adjusted logits (bias, repetition) equal transformers' scores; the
    // distribution the sampler draws from equals softmax of its processed scores.
    for (const nlohmann::json& p : golden["processors"]) {
      SCOPED_TRACE(p["name"].get<std::string>());
      SamplingParams params;
      params.repetition_penalty = p.value("repetition_penalty", 1.0f);
      const nlohmann::json bias_map = p.value("logit_bias", nlohmann::json::object());  // (a named value: items() does not own it)
      for (const auto& [token, bias] : bias_map.items()) {
        params.logit_bias.emplace_back(std::stoi(token), bias.get<float>());
      }
      std::vector<TokenAdjustment> adjustments;
      TokenHistory(params, prompt).AppendAdjustments(&adjustments);
      std::vector<float> adjusted = logits;
      ApplyAdjustments(adjusted, adjustments);
      if (p.contains("scores")) {
        for (int i = 0; i < vocab; ++i) {
          const nlohmann::json& want = p["scores"][static_cast<size_t>(i)];
          if (want.is_null()) {
            EXPECT_EQ(adjusted[static_cast<size_t>(i)], -std::numeric_limits<float>::infinity()) << i;
          } else {
            EXPECT_EQ(adjusted[static_cast<size_t>(i)], want.get<float>()) << "token " << i;  // the same float ops
          }
        }
      }
      const RowSampling sampling{p.value("temperature", 1.0f), p.value("top_k", 0), p.value("top_p", 1.0f), 0.0,
                                 p.value("min_p", 0.0f)};
      const std::vector<double> ours = SamplingDistribution(adjusted, sampling);
      for (int i = 0; i < vocab; ++i) {
        EXPECT_NEAR(ours[static_cast<size_t>(i)], p["probs"][static_cast<size_t>(i)].get<double>(), 1e-6) << "token " << i;
      }
    }

    // The prompt's log-probabilities (scoring) and its loss, through the engine.
    if (prompt.size() >= 2) {
      SamplingParams params;
      params.max_new_tokens = 1;
      params.prompt_logprobs = 3;
      const EngineRun run = Generate(**engine, prompt, params);
      const auto want = golden["prompt_logprobs"].get<std::vector<double>>();
      ASSERT_EQ(run.prompt_logprobs.size(), want.size());
      double nll = 0;
      for (size_t j = 0; j < want.size(); ++j) {
        EXPECT_EQ(run.prompt_logprobs[j].token, prompt[j + 1]);
        EXPECT_NEAR(run.prompt_logprobs[j].logprob, want[j], 1e-4) << "position " << j + 1;
        nll -= run.prompt_logprobs[j].logprob;
      }
      EXPECT_NEAR(nll / static_cast<double>(want.size()), golden["loss"].get<double>(), 1e-4);
    }

    // Greedy tokens' log-probabilities: compute_transition_scores over generate's raw
    // logits, for as long as generate (KV cache) chose the greedy goldens' tokens.
    {
      SamplingParams params;
      params.max_new_tokens = static_cast<int32_t>(c["greedy"].size());
      params.ignore_eos = true;
      params.logprobs = 5;
      const EngineRun run = Generate(**engine, prompt, params);
      EXPECT_EQ(run.tokens, c["greedy"].get<std::vector<int32_t>>());
      const auto gen_tokens = golden["generate_tokens"].get<std::vector<int32_t>>();
      const auto scores = golden["transition_scores"].get<std::vector<double>>();
      size_t compared = 0;
      for (size_t t = 0; t < std::min(run.tokens.size(), gen_tokens.size()) && run.tokens[t] == gen_tokens[t]; ++t) {
        EXPECT_NEAR(run.logprobs[t].logprob, scores[t], 1e-4) << "token " << t;
        const nlohmann::json& top = golden["generate_top_logprobs"][t];
        ASSERT_EQ(run.logprobs[t].top.size(), top.size());
        for (size_t k = 0; k < top.size(); ++k) {
          EXPECT_EQ(run.logprobs[t].top[k].token, top[k][0].get<int32_t>()) << "token " << t << " alternative " << k;
          EXPECT_NEAR(run.logprobs[t].top[k].logprob, top[k][1].get<double>(), 1e-4);
        }
        ++compared;
      }
      EXPECT_GE(compared, 8u) << "generate diverged from the greedy goldens early";
    }

    // Greedy under RepetitionPenaltyLogitsProcessor, token for token.
    {
      const nlohmann::json& rep = golden["repetition_greedy"];
      SamplingParams params;
      params.repetition_penalty = rep["repetition_penalty"].get<float>();
      params.max_new_tokens = static_cast<int32_t>(rep["tokens"].size());
      params.ignore_eos = true;
      params.logprobs = 0;
      const EngineRun run = Generate(**engine, prompt, params);
      EXPECT_EQ(run.tokens, rep["tokens"].get<std::vector<int32_t>>());
      const auto want = rep["logprobs"].get<std::vector<double>>();
      for (size_t t = 0; t < std::min(want.size(), run.logprobs.size()); ++t) {
        EXPECT_NEAR(run.logprobs[t].logprob, want[t], 1e-4) << "token " << t;
      }
    }
  }
}

// `kvtier perplexity` on a golden checkpoint equals transformers' loss on the same tokens
// within 1e-4 (CPU backend), in one window and in chunks.
TEST(PerplexityCliTest, EqualsTransformersLoss) {
  const nlohmann::json& goldens = parity::Goldens();
  ASSERT_FALSE(goldens.is_null());
  for (const std::string& name : {std::string("llama-gqa-rope3"), std::string("qwen2-bias-tied")}) {
    const nlohmann::json& model = goldens["models"][name];
    const std::string dir = parity::WriteModel(name, model["mkmodel_args"].get<std::vector<std::string>>());
    for (const nlohmann::json& c : model["cases"]) {
      const auto prompt = c["prompt"].get<std::vector<int32_t>>();
      if (prompt.size() < 23) continue;
      ASSERT_TRUE(c["sampling"].contains("loss"));
      const std::string tokens_file = testing::TestTempDir() + "/perplexity-" + name + ".txt";
      {
        std::ofstream out(tokens_file);
        for (int32_t t : prompt) out << t << ' ';
      }
      const std::string command = "'" + parity::KvtierCli() + "' perplexity --backend cpu --threads 2 --json --model '" +
                                  dir + "' --tokens '" + tokens_file + "' --max-tokens-per-step 10";
      FILE* pipe = popen(command.c_str(), "r");
      ASSERT_NE(pipe, nullptr);
      std::string output;
      char buf[4096];
      while (size_t n = fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
      ASSERT_EQ(pclose(pipe), 0) << command << "\n" << output;
      const nlohmann::json result = nlohmann::json::parse(output);
      EXPECT_EQ(result["scored_tokens"], static_cast<int64_t>(prompt.size() - 1));
      EXPECT_NEAR(result["mean_nll"].get<double>(), c["sampling"]["loss"].get<double>(), 1e-4) << name;
      EXPECT_NEAR(result["perplexity"].get<double>(), std::exp(c["sampling"]["loss"].get<double>()),
                  1e-4 * result["perplexity"].get<double>());
      std::printf("[perplexity] %s prompt %zu: mean NLL %.6f, transformers loss %.6f\n", name.c_str(), prompt.size(),
                  result["mean_nll"].get<double>(), c["sampling"]["loss"].get<double>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, SamplingParityTest, ::testing::ValuesIn(parity::GoldenModelNames()));

}  // namespace
}  // namespace kvtier
