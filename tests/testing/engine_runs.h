// Test helpers shared by the engine-level tests: an engine over the tiny Llama (or another
// test checkpoint) on the CPU backend, a handful of prompts, and stepping an engine while
// collecting the tokens it emits (optionally checking every invariant after each step).
// Not thread-safe: call from test bodies.
#ifndef KVTIER_TESTS_TESTING_ENGINE_RUNS_H_
#define KVTIER_TESTS_TESTING_ENGINE_RUNS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_prompts.h"
#include "testing/test_model.h"

namespace kvtier::testing {

// The checkpoint in `dir`, opened once per process and shared by the engines made over it
// (a Checkpoint is immutable once open).
inline std::shared_ptr<const Checkpoint> SharedCheckpoint(const std::string& dir) {
  static std::map<std::string, std::shared_ptr<const Checkpoint>> opened;
  std::shared_ptr<const Checkpoint>& checkpoint = opened[dir];
  if (checkpoint == nullptr) checkpoint = OpenCheckpoint(dir);
  return checkpoint;
}

// An engine over the checkpoint in `dir` (the tiny Llama by default) with these options;
// nullptr, and a test failure, if it cannot be created.
inline std::unique_ptr<Engine> MakeEngine(const EngineOptions& options, const std::string& dir = TinyLlamaDir()) {
  auto engine = Engine::Create(SharedCheckpoint(dir), options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// The CPU backend with two threads, `block_tokens`-token blocks and a 16 MiB device tier
// (thousands of blocks of the test models; the backend zeroes the whole pool at creation,
// which a larger tier would pay for in every engine a test makes).
inline EngineOptions CpuOptions(int64_t block_tokens = 4) {
  EngineOptions options;
  options.backend = "cpu";
  options.num_threads = 2;
  options.block_tokens = block_tokens;
  options.gpu_kv_bytes = 16 << 20;
  return options;
}

// `n` prompts of 5 to 17 tokens, the i-th seeded with seed + i.
inline std::vector<std::vector<int32_t>> SomePrompts(int n, int seed) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(Prompt(seed + i, 5 + (i * 7) % 13));
  return prompts;
}

// One step: the tokens it emits are appended per sequence to `out`; with `verify`, the
// engine's invariants (scheduler and KV manager) are checked after it. Fatal gtest
// failures: callers stop on HasFatalFailure().
inline void StepAndCollect(Engine& engine, std::map<SequenceId, std::vector<int32_t>>* out, bool verify) {
  std::vector<StepEvent> events;
  const absl::Status stepped = engine.Step(&events);
  ASSERT_TRUE(stepped.ok()) << stepped;
  if (verify) {
    const absl::Status verified = engine.VerifyIntegrity();
    ASSERT_TRUE(verified.ok()) << verified;
  }
  for (const StepEvent& e : events) {
    if (e.token) (*out)[e.sequence].push_back(*e.token);
  }
}

// Steps until every sequence has finished (at most `max_steps`); the tokens by sequence.
inline std::map<SequenceId, std::vector<int32_t>> RunToEnd(Engine& engine, bool verify = false,
                                                           int max_steps = 20000) {
  std::map<SequenceId, std::vector<int32_t>> out;
  for (int i = 0; i < max_steps && engine.NumUnfinished() > 0; ++i) {
    StepAndCollect(engine, &out, verify);
    if (::testing::Test::HasFatalFailure()) break;
  }
  EXPECT_EQ(engine.NumUnfinished(), 0);
  return out;
}

// An integer field of Engine::Stats() (a path of keys: Stat(s, "tiers", "gpu", "used_bytes")).
template <typename... Keys>
int64_t Stat(const nlohmann::json& stats, const Keys&... keys) {
  const nlohmann::json* node = &stats;
  ((node = &node->at(keys)), ...);
  return node->get<int64_t>();
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_ENGINE_RUNS_H_
