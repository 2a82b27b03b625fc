// Engine tests on the CPU backend with a tiny random model: batching invariance, exactness
// under preemption and chunked prefill, cancel, admission errors, concurrent adds.
#include "engine/engine.h"

#include <atomic>
#include <map>
#include <thread>

#include "gtest/gtest.h"
#include "testing/engine_runs.h"
#include "testing/forwarding_backend.h"

namespace kvtier {
namespace {

using testing::CpuOptions;
using testing::Greedy;
using testing::MakeEngine;
using testing::Prompt;
using testing::RunToEnd;

std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, const SamplingParams& params) {
  auto engine = MakeEngine(CpuOptions());
  SequenceId id = *engine->Add(prompt, params);
  return RunToEnd(*engine)[id];
}

TEST(EngineTest, GeneratesExactlyMaxNewTokensAndFreesBlocks) {
  auto engine = MakeEngine(CpuOptions());
  auto id = engine->Add(Prompt(1, 9), Greedy(7));
  ASSERT_TRUE(id.ok()) << id.status();
  auto out = RunToEnd(*engine);
  EXPECT_EQ(out[*id].size(), 7u);
  nlohmann::json stats = engine->Stats();
  EXPECT_EQ(stats["tiers"]["gpu"]["used_bytes"], 0);
  EXPECT_GT(stats["tiers"]["gpu"]["peak_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(stats["generated_tokens"], 7);
  EXPECT_EQ(stats["gpu_allocs_after_init"], 0);
  int64_t finish = -1;
  ASSERT_TRUE(engine->ReadSequence(*id, [&](const Sequence& s) { finish = static_cast<int64_t>(s.finish); }).ok());
  EXPECT_EQ(finish, static_cast<int64_t>(FinishReason::kLength));
}

TEST(EngineTest, BatchingInvarianceWithJoinsAndLeaves) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_new = {12, 5, 9, 12, 3, 7};
  for (int i = 0; i < 6; ++i) prompts.push_back(Prompt(100 + i, 3 + 4 * i));
  std::vector<std::vector<int32_t>> solo;
  for (int i = 0; i < 6; ++i) solo.push_back(Alone(prompts[static_cast<size_t>(i)], Greedy(max_new[static_cast<size_t>(i)])));

  EngineOptions options = CpuOptions();
  options.max_tokens_per_step = 7;  // forces chunked prefill mixed with decodes
  auto engine = MakeEngine(options);
  std::map<SequenceId, int> index;
  std::map<SequenceId, std::vector<int32_t>> out;
  std::vector<StepEvent> events;
  int next = 0;
  for (int step = 0; step < 500 && (next < 6 || engine->NumUnfinished() > 0); ++step) {
    if (next < 6 && step % 3 == 0) {  // sequences join every third step
      index[*engine->Add(prompts[static_cast<size_t>(next)], Greedy(max_new[static_cast<size_t>(next)]))] = next;
      ++next;
    }
    events.clear();
    ASSERT_TRUE(engine->Step(&events).ok());
    for (const auto& e : events) {
      if (e.token) out[e.sequence].push_back(*e.token);
    }
  }
  for (const auto& [id, i] : index) EXPECT_EQ(out[id], solo[static_cast<size_t>(i)]) << "sequence " << i;
}

TEST(EngineTest, RecomputePreemptionIsExact) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(Prompt(200 + i, 6 + i));
  std::vector<std::vector<int32_t>> solo;
  for (const auto& p : prompts) solo.push_back(Alone(p, Greedy(14)));

  EngineOptions options = CpuOptions();
  auto probe = MakeEngine(options);
  const int64_t block_bytes = static_cast<int64_t>(probe->backend().kv_layout().BlockBytes());
  options.gpu_kv_bytes = block_bytes * 9;  // 5 sequences of up to 24 tokens need 30 blocks
  auto engine = MakeEngine(options);
  std::vector<SequenceId> ids;
  for (const auto& p : prompts) ids.push_back(*engine->Add(p, Greedy(14)));
  auto out = RunToEnd(*engine);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(out[ids[i]], solo[i]) << "sequence " << i;
  nlohmann::json stats = engine->Stats();
  EXPECT_GT(stats["preemptions"].get<int64_t>(), 0);
  EXPECT_LE(stats["tiers"]["gpu"]["peak_bytes"].get<int64_t>(), block_bytes * 9);
  EXPECT_EQ(stats["backend"], "cpu");
  EXPECT_EQ(stats["kv_dtype"], "F32");
}

TEST(EngineTest, SeededSamplingIsReproducibleInAnyBatch) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.seed = 1234;
  p.max_new_tokens = 10;
  p.ignore_eos = true;
  std::vector<int32_t> alone = Alone(Prompt(7, 5), p);
  auto engine = MakeEngine(CpuOptions());
  engine->Add(Prompt(8, 11), Greedy(4)).IgnoreError();
  SequenceId id = *engine->Add(Prompt(7, 5), p);
  EXPECT_EQ(RunToEnd(*engine)[id], alone);
}

TEST(EngineTest, CancelReleasesBlocksAndLeavesOthersAlone) {
  std::vector<int32_t> keep_prompt = Prompt(11, 8);
  std::vector<int32_t> expected = Alone(keep_prompt, Greedy(10));
  auto engine = MakeEngine(CpuOptions());
  SequenceId keep = *engine->Add(keep_prompt, Greedy(10));
  SequenceId drop = *engine->Add(Prompt(12, 8), Greedy(50));
  std::vector<StepEvent> events;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine->Step(&events).ok());
  ASSERT_TRUE(engine->Cancel(drop).ok());
  events.clear();
  ASSERT_TRUE(engine->Step(&events).ok());
  bool saw_cancel = false;
  for (const auto& e : events) {
    if (e.sequence == drop) {
      EXPECT_EQ(e.finish, FinishReason::kCancelled);
      EXPECT_FALSE(e.token.has_value());
      saw_cancel = true;
    }
  }
  EXPECT_TRUE(saw_cancel);
  EXPECT_EQ(engine->Cancel(drop).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->Cancel(987654).code(), absl::StatusCode::kNotFound);
  auto rest = RunToEnd(*engine);
  std::vector<int32_t> got;
  ASSERT_TRUE(engine->ReadSequence(keep, [&](const Sequence& s) {
    got.assign(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
  }).ok());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(engine->Stats()["tiers"]["gpu"]["used_bytes"], 0);
  ASSERT_TRUE(engine->Release(drop).ok());
  EXPECT_EQ(engine->Release(drop).code(), absl::StatusCode::kNotFound);
}

TEST(EngineTest, AdmissionErrorsNameTheProblem) {
  EngineOptions options = CpuOptions();
  auto probe = MakeEngine(options);
  options.gpu_kv_bytes = static_cast<int64_t>(probe->backend().kv_layout().BlockBytes()) * 4;  // 16 tokens
  options.max_waiting = 2;
  auto engine = MakeEngine(options);
  auto empty = engine->Add({}, Greedy(3));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  auto oov = engine->Add({1, 2, 99999}, Greedy(3));
  EXPECT_EQ(oov.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(oov.status().message().find("99999"), std::string::npos);
  auto zero = engine->Add({1, 2}, Greedy(0));
  EXPECT_NE(zero.status().message().find("max_new_tokens"), std::string::npos);
  auto huge = engine->Add({1, 2, 3}, Greedy(100));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("4 blocks"), std::string::npos) << huge.status();
  ASSERT_TRUE(engine->Add({1, 2}, Greedy(3)).ok());
  ASSERT_TRUE(engine->Add({1, 2}, Greedy(3)).ok());
  auto busy = engine->Add({1, 2}, Greedy(3));
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
  // The failures changed nothing: the two admitted sequences run to the end.
  auto out = RunToEnd(*engine);
  EXPECT_EQ(out.size(), 2u);
}

TEST(EngineTest, AddAndCancelFromOtherThreadsWhileStepping) {
  auto engine = MakeEngine(CpuOptions());
  std::atomic<bool> adding{true};
  std::atomic<int> added{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i) {
        auto id = engine->Add(Prompt(t * 100 + i, 4 + i % 5), Greedy(1 + i % 6));
        if (!id.ok()) continue;
        ++added;
        if (i % 3 == 0) engine->Cancel(*id).IgnoreError();
        engine->ReadSequence(*id, [](const Sequence&) {}).IgnoreError();
      }
    });
  }
  std::thread closer([&] {
    for (auto& th : threads) th.join();
    adding = false;
  });
  std::vector<StepEvent> events;
  while (adding || engine->NumUnfinished() > 0) {
    events.clear();
    ASSERT_TRUE(engine->Step(&events).ok());
  }
  closer.join();
  nlohmann::json stats = engine->Stats();
  EXPECT_EQ(stats["sequences"]["finished"].get<int>(), added.load());
  EXPECT_EQ(stats["sequences"]["completed"].get<int>() + stats["sequences"]["cancelled"].get<int>(), added.load());
  EXPECT_EQ(stats["tiers"]["gpu"]["used_bytes"], 0);
}

// A backend exact only over its first positions (the CUDA forward on a sliding-window
// model): the engine refuses longer prompts with the backend's reason, and stops every
// sequence there, with the tokens an uncapped run gives up to that point.
class PositionCappedBackend final : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::optional<PositionLimit> position_limit() const override {
    return PositionLimit{12, "this backend runs the window only (test)"};
  }
};

TEST(EngineTest, ABackendsPositionLimitCapsEverySequence) {
  EngineOptions options = CpuOptions();
  options.wrap_backend = [](std::unique_ptr<Backend> inner) -> std::unique_ptr<Backend> {
    return std::make_unique<PositionCappedBackend>(std::move(inner));
  };
  auto engine = MakeEngine(options);
  absl::StatusOr<SequenceId> too_long = engine->Add(Prompt(1, 12), Greedy(4));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("this backend runs the window only (test) (12 positions)"),
            std::string::npos)
      << too_long.status();

  const std::vector<int32_t> uncapped = Alone(Prompt(2, 9), Greedy(8));
  auto id = engine->Add(Prompt(2, 9), Greedy(8));
  ASSERT_TRUE(id.ok()) << id.status();
  auto out = RunToEnd(*engine);
  ASSERT_EQ(out[*id].size(), 3u);  // 9 + 3 = 12 positions
  EXPECT_EQ(out[*id], std::vector<int32_t>(uncapped.begin(), uncapped.begin() + 3));
  int64_t finish = -1;
  ASSERT_TRUE(engine->ReadSequence(*id, [&](const Sequence& s) { finish = static_cast<int64_t>(s.finish); }).ok());
  EXPECT_EQ(finish, static_cast<int64_t>(FinishReason::kLength));
}

}  // namespace
}  // namespace kvtier
