// Helpers of the engine-level tier tests (tiers_test.cc, async_copies_test.cc): engine
// options over the tiny Llama on the CPU backend with tiers sized in blocks, prompts,
// greedy sampling, and running prompts to the end while checking the KV invariants after
// every step. Not thread-safe.
#ifndef KVTIER_TESTS_KV_TIER_TEST_UTIL_H_
#define KVTIER_TESTS_KV_TIER_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_runs.h"
#include "testing/fake_file_io.h"

namespace kvtier::testing {

inline constexpr int64_t kTierTestBlockTokens = 4;

// Bytes of one KV block of the tiny Llama on the CPU backend.
inline int64_t TierTestBlockBytes() {
  static const int64_t bytes = [] {
    return static_cast<int64_t>(MakeEngine(CpuOptions(kTierTestBlockTokens))->backend().kv_layout().BlockBytes());
  }();
  return bytes;
}

inline EngineOptions TierOptions(int64_t gpu_blocks, int64_t host_blocks = 0,
                                 int64_t disk_blocks = 0, const std::string& disk_path = "") {
  EngineOptions o;
  o.backend = "cpu";
  o.num_threads = 2;
  o.block_tokens = kTierTestBlockTokens;
  o.gpu_kv_bytes = gpu_blocks * TierTestBlockBytes();
  o.host_kv_bytes = host_blocks * TierTestBlockBytes();
  o.disk_kv_bytes = disk_blocks * TierTestBlockBytes();
  o.disk_path = disk_path;
  // Hit counts stay exact: every slow-tier hit is loaded (the split is tested on its own).
  o.load_or_recompute = false;
  return o;
}

// Runs every prompt to the end, checking invariants after each step; tokens by input order.
// `before_step(step)`, when given, runs before each step (fault injection).
inline std::vector<std::vector<int32_t>> RunAll(Engine& engine,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int max_new,
                                                const std::function<void(int)>& before_step = {}) {
  std::vector<SequenceId> ids;
  for (const auto& p : prompts) {
    auto id = engine.Add(p, Greedy(max_new));
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  std::map<SequenceId, std::vector<int32_t>> out;
  for (int step = 0; step < 20000 && engine.NumUnfinished() > 0; ++step) {
    if (before_step) before_step(step);
    StepAndCollect(engine, &out, /*verify=*/true);
    if (::testing::Test::HasFatalFailure()) break;
  }
  std::vector<std::vector<int32_t>> result;
  for (SequenceId id : ids) result.push_back(out[id]);
  return result;
}

// Runs `prompts` (swapping through a disk tier on `io`) with a disk fault of some kind armed
// every few steps: failed and short writes, a torn write, a failed read. Every output must
// still equal `expected`, and the faults must have been met (swaps happened, errors or
// corrupt blocks were counted).
inline void ExpectExactUnderDiskFaults(Engine& engine, FakeFileIo& io,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       const std::vector<std::vector<int32_t>>& expected, int max_new) {
  const auto arm_a_fault = [&io](int step) {
    switch (step % 9) {
      case 1: io.FailNextWrites(1); break;
      case 3: io.TornWriteNext(100); break;
      case 5: io.FailNextReads(1); break;
      case 7: io.ShortWriteNext(10); break;
      default: break;
    }
  };
  EXPECT_EQ(RunAll(engine, prompts, max_new, arm_a_fault), expected);
  const nlohmann::json s = engine.Stats();
  EXPECT_GT(s["swaps_out"].get<int64_t>(), 0);
  EXPECT_GT(s["io_errors"].get<int64_t>() + s["corrupt_blocks_detected"].get<int64_t>(), 0) << s.dump();
}

// `ops` random operations seeded by `seed` — add (half of them over a shared 8-token
// prefix), cancel, step — with the KV invariants checked after each, then every sequence
// run to the end. Fatal gtest failures: call it inside ASSERT_NO_FATAL_FAILURE.
inline void RunRandomOps(Engine& engine, uint32_t seed, int ops) {
  std::mt19937 rng(seed);
  std::vector<SequenceId> live;
  const std::vector<int32_t> shared = Prompt(500, 8);
  std::vector<StepEvent> events;
  for (int op = 0; op < ops; ++op) {
    const uint32_t r = rng() % 10;
    if (r < 3) {
      auto id = engine.Add(Prompt(static_cast<int>(rng()), 1 + rng() % 12,
                                  rng() % 2 ? shared : std::vector<int32_t>{}),
                           Greedy(1 + static_cast<int>(rng() % 10)));
      if (id.ok()) live.push_back(*id);
    } else if (r < 4 && !live.empty()) {
      engine.Cancel(live[rng() % live.size()]).IgnoreError();
    } else {
      events.clear();
      ASSERT_TRUE(engine.Step(&events).ok());
    }
    absl::Status integrity = engine.VerifyIntegrity();
    ASSERT_TRUE(integrity.ok()) << integrity << " seed " << seed << " op " << op;
  }
  while (engine.NumUnfinished() > 0) ASSERT_TRUE(engine.Step(&events).ok());
  ASSERT_TRUE(engine.VerifyIntegrity().ok());
}

// An integer field of Engine::Stats().
inline int64_t Get(const nlohmann::json& stats, const char* key) { return stats[key].get<int64_t>(); }

// The tokens of an unlimited-memory run (4096 device blocks), computed once per process
// for each (prompts, max_new): several tests compare against the same run.
inline std::vector<std::vector<int32_t>> Reference(
    const std::vector<std::vector<int32_t>>& prompts, int max_new) {
  static std::map<std::pair<std::vector<std::vector<int32_t>>, int>, std::vector<std::vector<int32_t>>> runs;
  auto it = runs.find({prompts, max_new});
  if (it != runs.end()) return it->second;
  auto e = MakeEngine(TierOptions(4096));
  if (e == nullptr) return {};
  std::vector<std::vector<int32_t>> tokens = RunAll(*e, prompts, max_new);
  if (!::testing::Test::HasFailure()) runs[{prompts, max_new}] = tokens;
  return tokens;
}

// Six prompts swapping through a disk tier with faults of every kind armed
// (ExpectExactUnderDiskFaults), on the engine `make` builds from the options.
inline void ExpectDiskFaultsNeverCorruptOutput(const std::function<std::unique_ptr<Engine>(EngineOptions)>& make) {
  const auto prompts = SomePrompts(6, 40);
  const auto expected = Reference(prompts, 16);
  FakeFileIo io;
  EngineOptions o = TierOptions(/*gpu_blocks=*/14, /*host_blocks=*/0, /*disk_blocks=*/64, "/fake/kv.bin");
  o.file_io = &io;
  o.preemption = PreemptionMode::kSwap;
  auto engine = make(o);
  ASSERT_NE(engine, nullptr);
  ExpectExactUnderDiskFaults(*engine, io, prompts, expected, 16);
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_TIER_TEST_UTIL_H_
