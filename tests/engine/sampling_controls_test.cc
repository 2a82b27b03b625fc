// The engine's sampler controls, log-probabilities, prompt scoring and parallel sampling on
// the CPU backend with a tiny random model: each against a plain loop over
// Backend::Forward's logits (the reference the chain is defined by), reproducibility alone
// and in batches, and n completions sharing one prompt's blocks.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "backend/logprobs.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_runs.h"
#include "testing/sanitizers.h"

namespace kvtier {
namespace {

using testing::CpuOptions;
using testing::OpenCheckpoint;

std::string ModelDir() {
  auto spec = RandomCheckpointPreset("tiny-llama");
  EXPECT_TRUE(spec.ok());
  spec->max_positions = 4096;  // room for a 2,048-token prompt and its completions
  spec->seed = 21;
  return testing::WriteTestModel("tiny-llama-4k-21", *spec);
}

std::unique_ptr<Engine> MakeCpuEngine(const EngineOptions& options) { return testing::MakeEngine(options, ModelDir()); }

std::vector<int32_t> SeededPrompt(int seed, int length) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> ids;
  for (int i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>(3 + rng() % 60));  // repeats
  return ids;
}

struct Output {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
};

std::map<SequenceId, Output> RunOutputs(Engine& engine) {
  std::map<SequenceId, Output> out;
  std::vector<StepEvent> events;
  for (int i = 0; i < 100000 && engine.NumUnfinished() > 0; ++i) {
    events.clear();
    const absl::Status s = engine.Step(&events);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(engine.VerifyIntegrity().ok()) << engine.VerifyIntegrity();
    for (const StepEvent& e : events) {
      if (!e.token) continue;
      out[e.sequence].tokens.push_back(*e.token);
      if (e.logprobs) out[e.sequence].logprobs.push_back(*e.logprobs);
    }
  }
  EXPECT_EQ(engine.NumUnfinished(), 0);
  return out;
}

SamplingParams AllControls(uint64_t seed) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  p.logit_bias = {{5, 2.0f}, {7, -100.0f}};
  p.logprobs = 3;
  p.seed = seed;
  p.max_new_tokens = 24;
  p.ignore_eos = true;
  return p;
}

Output Solo(const std::vector<int32_t>& prompt, const SamplingParams& params, const EngineOptions& options = CpuOptions()) {
  auto engine = MakeCpuEngine(options);
  const SequenceId id = *engine->Add(prompt, params);
  return RunOutputs(*engine)[id];
}

// A greedy request with penalties and bias decoded by hand: Forward's logits of the whole
// context each step, the chain's definitions applied, the first maximum taken; the
// log-probabilities log-softmax of the raw logits. The engine must agree token for token.
TEST(SamplingControlsTest, GreedyWithPenaltiesMatchesHandDecoding) {
  SamplingParams params = AllControls(0);
  params.temperature = 0.0f;
  params.max_new_tokens = 20;
  const std::vector<int32_t> prompt = SeededPrompt(3, 19);
  const Output got = Solo(prompt, params);

  BackendOptions backend_options;
  backend_options.block_tokens = 4;
  auto backend = CreateBackend("cpu", *OpenCheckpoint(ModelDir()), backend_options);
  ASSERT_TRUE(backend.ok());
  ASSERT_TRUE((*backend)->AllocateKvPool(64).ok());
  std::vector<int32_t> table(64);
  for (int i = 0; i < 64; ++i) table[static_cast<size_t>(i)] = i;
  std::vector<int32_t> context = prompt;
  std::map<int32_t, int> generated;
  for (int step = 0; step < params.max_new_tokens; ++step) {
    ForwardBatch batch;
    batch.chunks.push_back({context, 0, table, true});
    std::vector<float> logits;
    ASSERT_TRUE((*backend)->Forward(batch, &logits).ok());
    const double lse = LogSumExp(logits);
    std::vector<float> adjusted = logits;
    for (const auto& [t, b] : params.logit_bias) adjusted[static_cast<size_t>(t)] += b;
    std::vector<int32_t> seen = context;
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) {
      float& l = adjusted[static_cast<size_t>(t)];
      l = l < 0 ? l * params.repetition_penalty : l / params.repetition_penalty;
    }
    for (const auto& [t, n] : generated) {
      adjusted[static_cast<size_t>(t)] -= static_cast<float>(n) * params.frequency_penalty + params.presence_penalty;
    }
    const int32_t want = static_cast<int32_t>(std::max_element(adjusted.begin(), adjusted.end()) - adjusted.begin());
    ASSERT_LT(static_cast<size_t>(step), got.tokens.size());
    ASSERT_EQ(got.tokens[static_cast<size_t>(step)], want) << "step " << step;
    const TokenLogprobs& lp = got.logprobs[static_cast<size_t>(step)];
    EXPECT_EQ(lp.token, want);
    EXPECT_NEAR(lp.logprob, logits[static_cast<size_t>(want)] - lse, 1e-5);
    ASSERT_EQ(lp.top.size(), 3u);
    const int32_t top1 = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(lp.top[0].token, top1);
    EXPECT_NEAR(lp.top[0].logprob, logits[static_cast<size_t>(top1)] - lse, 1e-5);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
    context.push_back(want);
    ++generated[want];
  }
  // The controls changed the outcome (else this test would prove nothing).
  SamplingParams plain;
  plain.max_new_tokens = params.max_new_tokens;
  plain.ignore_eos = true;
  EXPECT_NE(Solo(prompt, plain).tokens, got.tokens);
}

// A seeded request with every control gives the same tokens and log-probabilities alone
// and in a batch with others of different settings, chunked prefill and preemption included.
TEST(SamplingControlsTest, SeededControlsReproduceAloneAndInBatches) {
  const std::vector<int32_t> prompt = SeededPrompt(5, 23);
  const SamplingParams params = AllControls(1234);
  const Output alone = Solo(prompt, params);
  ASSERT_EQ(alone.tokens.size(), 24u);
  ASSERT_EQ(alone.logprobs.size(), 24u);

  EngineOptions tight = CpuOptions();
  tight.max_tokens_per_step = 7;  // chunked prefill
  // 40 blocks of 2 layers x (K, V) x 2 heads x 4 tokens x 16 dims x 4 bytes: the batch
  // (7 sequences of up to 54 tokens) preempts.
  tight.gpu_kv_bytes = 40 * 2 * 2 * 2 * 4 * 16 * 4;
  auto engine = Engine::Create(OpenCheckpoint(ModelDir()), tight);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<SequenceId> ids;
  for (int i = 0; i < 6; ++i) {
    SamplingParams other = AllControls(static_cast<uint64_t>(i));
    other.repetition_penalty = 1.0f + 0.1f * static_cast<float>(i);
    other.logprobs = i % 2 == 0 ? -1 : 5;
    ids.push_back(*(*engine)->Add(SeededPrompt(10 + i, 15 + 3 * i), other));
    if (i == 2) ids.push_back(*(*engine)->Add(prompt, params));
  }
  const auto out = RunOutputs(**engine);
  const Output& batched = out.at(ids[3]);
  EXPECT_EQ(batched.tokens, alone.tokens);
  ASSERT_EQ(batched.logprobs.size(), alone.logprobs.size());
  for (size_t i = 0; i < alone.logprobs.size(); ++i) {
    EXPECT_EQ(batched.logprobs[i].logprob, alone.logprobs[i].logprob);
    ASSERT_EQ(batched.logprobs[i].top.size(), alone.logprobs[i].top.size());
    for (size_t j = 0; j < alone.logprobs[i].top.size(); ++j) {
      EXPECT_EQ(batched.logprobs[i].top[j].token, alone.logprobs[i].top[j].token);
    }
  }
  EXPECT_GT((*engine)->Stats()["preemptions"].get<int64_t>(), 0);
}

// SeededPrompt log-probabilities equal log-softmax of one whole-prompt forward, in chunks and
// whatever the prefix cache holds; the first completion carries them.
TEST(SamplingControlsTest, PromptLogprobsMatchOneForward) {
  const std::vector<int32_t> prompt = SeededPrompt(9, 37);
  BackendOptions backend_options;
  backend_options.block_tokens = 4;
  auto backend = CreateBackend("cpu", *OpenCheckpoint(ModelDir()), backend_options);
  ASSERT_TRUE(backend.ok());
  ASSERT_TRUE((*backend)->AllocateKvPool(16).ok());
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[static_cast<size_t>(i)] = i;
  std::vector<double> want;
  for (size_t p = 1; p < prompt.size(); ++p) {
    ForwardBatch batch;
    batch.chunks.push_back({std::span<const int32_t>(prompt).first(p), 0, table, true});
    std::vector<float> logits;
    ASSERT_TRUE((*backend)->Forward(batch, &logits).ok());
    want.push_back(logits[static_cast<size_t>(prompt[p])] - LogSumExp(logits));
  }

  EngineOptions options = CpuOptions();
  options.max_tokens_per_step = 10;
  auto engine = MakeCpuEngine(options);
  SamplingParams params;
  params.max_new_tokens = 2;
  const SequenceId warm = *engine->Add(prompt, params);  // the prefix is cached now
  RunOutputs(*engine);
  params.prompt_logprobs = 2;
  params.n = 2;
  const SequenceId id = *engine->Add(prompt, params);
  RunOutputs(*engine);
  ASSERT_TRUE(engine->ReadSequence(id, [&](const Sequence& seq) {
    ASSERT_EQ(seq.prompt_logprobs.size(), prompt.size() - 1);
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ(seq.prompt_logprobs[j].token, prompt[j + 1]);
      EXPECT_NEAR(seq.prompt_logprobs[j].logprob, want[j], 1e-5) << "position " << j + 1;
      EXPECT_EQ(seq.prompt_logprobs[j].top.size(), 2u);
    }
  }).ok());
  ASSERT_TRUE(engine->ReadSequence(id + 1, [&](const Sequence& seq) { EXPECT_TRUE(seq.prompt_logprobs.empty()); }).ok());
  EXPECT_EQ(engine->Stats()["scored_prompt_tokens"], static_cast<int64_t>(prompt.size() - 1));
  (void)warm;
}

// n = 8 completions of one 2,048-token prompt: the prompt's blocks are held once (the
// statistics show the 7 other completions sharing its 128 full blocks, and the device
// tier's peak stays far below 8 prompts' worth), and completion i equals the request run
// alone with seed + i.
TEST(SamplingControlsTest, EightCompletionsShareThePromptAndEqualSoloRuns) {
  // 2,048 tokens, in two chunks; a quarter of that under sanitizers (nine runs of the
  // prompt's prefill are this test's cost).
  const int prompt_tokens = testing::kSanitized ? 512 : 2048;
  const int64_t prompt_blocks = prompt_tokens / 16;
  const std::vector<int32_t> prompt = SeededPrompt(11, prompt_tokens);
  SamplingParams params = AllControls(500);
  params.max_new_tokens = 6;
  params.n = 8;
  EngineOptions options = CpuOptions(16);
  options.max_tokens_per_step = prompt_tokens / 2;
  auto engine = MakeCpuEngine(options);
  const SequenceId first = *engine->Add(prompt, params);
  const auto out = RunOutputs(*engine);
  const nlohmann::json stats = engine->Stats();
  EXPECT_EQ(stats["parallel_sampling"]["forks"], 7);
  EXPECT_EQ(stats["parallel_sampling"]["shared_blocks"], 7 * prompt_blocks);
  EXPECT_EQ(stats["parallel_sampling"]["copied_blocks"], 0);  // the prompt fills its blocks
  EXPECT_EQ(stats["prompt_tokens_computed"], prompt_tokens);
  const int64_t block_bytes = stats["block_bytes"];
  // The prompt once, plus each completion's own blocks for its 6 tokens (one block each).
  EXPECT_LE(stats["tiers"]["gpu"]["peak_bytes"].get<int64_t>(), (prompt_blocks + 8) * block_bytes);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE("completion " + std::to_string(i));
    SamplingParams solo = params;
    solo.n = 1;
    solo.seed = params.seed + static_cast<uint64_t>(i);
    const Output want = Solo(prompt, solo, options);
    const Output& got = out.at(first + i);
    EXPECT_EQ(got.tokens, want.tokens);
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t t = 0; t < want.logprobs.size(); ++t) EXPECT_EQ(got.logprobs[t].logprob, want.logprobs[t].logprob);
  }
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 8; ++i) distinct.insert(out.at(first + i).tokens);
  EXPECT_GT(distinct.size(), 1u);
}

// A prompt that ends inside a block: each completion gets its own copy of that block
// (copy on write) and still equals its solo run; completions cancelled before the fork,
// or whose first completion is cancelled, run alone and still equal theirs.
TEST(SamplingControlsTest, PartialBlockIsCopiedAndCancelsLeaveOthersExact) {
  const std::vector<int32_t> prompt = SeededPrompt(13, 37);
  SamplingParams params = AllControls(77);
  params.n = 4;
  auto solo = [&](int i) {
    SamplingParams p = params;
    p.n = 1;
    p.seed = params.seed + static_cast<uint64_t>(i);
    return Solo(prompt, p).tokens;
  };
  {
    auto engine = MakeCpuEngine(CpuOptions());
    const SequenceId first = *engine->Add(prompt, params);
    ASSERT_TRUE(engine->Cancel(first + 2).ok());
    const auto out = RunOutputs(*engine);
    EXPECT_EQ(engine->Stats()["parallel_sampling"]["copied_blocks"], 2);  // 37 = 9 blocks of 4 + 1
    EXPECT_EQ(engine->Stats()["parallel_sampling"]["shared_blocks"], 2 * 9);
    for (int i : {0, 1, 3}) EXPECT_EQ(out.at(first + i).tokens, solo(i)) << i;
    EXPECT_EQ(out.count(first + 2), 0u);
  }
  {
    auto engine = MakeCpuEngine(CpuOptions());
    const SequenceId first = *engine->Add(prompt, params);
    ASSERT_TRUE(engine->Cancel(first).ok());
    const auto out = RunOutputs(*engine);
    EXPECT_EQ(engine->Stats()["parallel_sampling"]["forks"], 0);
    for (int i : {1, 2, 3}) EXPECT_EQ(out.at(first + i).tokens, solo(i)) << i;
  }
}

TEST(SamplingControlsTest, AddRejectsBadControls) {
  auto engine = MakeCpuEngine(CpuOptions());
  SamplingParams p;
  p.logit_bias = {{512, 1.0f}};  // the vocabulary is 512
  EXPECT_EQ(engine->Add(SeededPrompt(1, 5), p).status().code(), absl::StatusCode::kInvalidArgument);
  p.logit_bias = {{3, 1.0f}, {3, 2.0f}};
  EXPECT_EQ(engine->Add(SeededPrompt(1, 5), p).status().code(), absl::StatusCode::kInvalidArgument);
  p = SamplingParams();
  p.repetition_penalty = std::nanf("");
  EXPECT_EQ(engine->Add(SeededPrompt(1, 5), p).status().code(), absl::StatusCode::kInvalidArgument);
  p = SamplingParams();
  p.n = 0;
  EXPECT_EQ(engine->Add(SeededPrompt(1, 5), p).status().code(), absl::StatusCode::kInvalidArgument);
  p = SamplingParams();
  p.logprobs = 21;
  EXPECT_EQ(engine->Add(SeededPrompt(1, 5), p).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->NumUnfinished(), 0);
}

}  // namespace
}  // namespace kvtier
