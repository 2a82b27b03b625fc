// The engine with tensor_parallel on the CPU backend: TP = 2 and 4 emit TP = 1's tokens (the
// sharded plan) under swap and recompute pressure, the plain forward's too, and KV blocks
// written at one degree are disk-tier hits at another, in both directions.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_runs.h"

namespace kvtier {
namespace {

using testing::Greedy;
using testing::MakeEngine;
using testing::Prompt;
using testing::RunToEnd;

// Eight query heads over four KV heads: degrees 1, 2 and 4 split them.
std::string ShardableModel() {
  RandomCheckpointSpec spec;
  spec.heads = 8;
  spec.kv_heads = 4;
  spec.head_dim = 16;
  spec.intermediate = 128;
  spec.seed = 21;
  return testing::WriteTestModel("tp-llama-h8-kv4", spec);
}

// Degree 0 stands for the plain forward (TP = 1 without the sharded plan).
EngineOptions TpOptions(int32_t degree) {
  EngineOptions options = testing::CpuOptions();
  options.tensor_parallel = degree == 0 ? 1 : degree;
  options.sharded_reduction = degree == 1;
  return options;
}

struct TpRun {
  std::vector<std::vector<int32_t>> tokens;  // by prompt
  nlohmann::json stats;
};

TpRun RunTp(const EngineOptions& options, const std::vector<std::vector<int32_t>>& prompts, int max_new) {
  TpRun run;
  auto engine = MakeEngine(options, ShardableModel());
  if (engine == nullptr) return run;
  std::vector<SequenceId> ids;
  for (const auto& prompt : prompts) ids.push_back(*engine->Add(prompt, Greedy(max_new)));
  std::map<SequenceId, std::vector<int32_t>> out = RunToEnd(*engine, /*verify=*/true, /*max_steps=*/2000);
  for (SequenceId id : ids) run.tokens.push_back(out[id]);
  run.stats = engine->Stats();
  return run;
}

std::vector<std::vector<int32_t>> TpPrompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(Prompt(300 + i, 6 + 2 * i));
  return prompts;
}

int64_t TpBlockBytes() {
  auto probe = MakeEngine(TpOptions(1), ShardableModel());
  return probe == nullptr ? 0 : static_cast<int64_t>(probe->backend().kv_layout().BlockBytes());
}

TEST(TensorParallelEngineTest, DegreesAgreeWithoutPressure) {
  const TpRun tp1 = RunTp(TpOptions(1), TpPrompts(), 12);
  ASSERT_EQ(tp1.tokens.size(), 5u);
  EXPECT_NE(tp1.stats["compute_path"].get<std::string>().find("tensor parallel 1"), std::string::npos);
  for (int32_t degree : {2, 4}) {
    EXPECT_EQ(RunTp(TpOptions(degree), TpPrompts(), 12).tokens, tp1.tokens) << "tensor_parallel " << degree;
  }
  EXPECT_EQ(RunTp(TpOptions(0), TpPrompts(), 12).tokens, tp1.tokens) << "the plain forward's greedy tokens";
}

class TensorParallelPressureTest : public ::testing::TestWithParam<PreemptionMode> {};

TEST_P(TensorParallelPressureTest, DegreesAgreeWhenSequencesArePaused) {
  const int64_t block_bytes = TpBlockBytes();
  ASSERT_GT(block_bytes, 0);
  const TpRun unpressured = RunTp(TpOptions(1), TpPrompts(), 14);
  std::vector<TpRun> runs;
  for (int32_t degree : {1, 2, 4}) {
    EngineOptions options = TpOptions(degree);
    options.gpu_kv_bytes = block_bytes * 9;  // 5 sequences of up to 28 tokens need 35 blocks
    options.host_kv_bytes = block_bytes * 64;
    options.preemption = GetParam();
    runs.push_back(RunTp(options, TpPrompts(), 14));
    SCOPED_TRACE(absl::StrCat("tensor_parallel ", degree));
    EXPECT_EQ(runs.back().tokens, unpressured.tokens);
    EXPECT_GT(runs.back().stats["preemptions"].get<int64_t>(), 0);
    if (GetParam() == PreemptionMode::kSwap) {
      EXPECT_GT(runs.back().stats["swaps_out"].get<int64_t>(), 0);
    } else {
      EXPECT_GT(runs.back().stats["recomputes"].get<int64_t>(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Preemption, TensorParallelPressureTest,
                         ::testing::Values(PreemptionMode::kSwap, PreemptionMode::kRecompute),
                         [](const ::testing::TestParamInfo<PreemptionMode>& info) {
                           return std::string(info.param == PreemptionMode::kSwap ? "swap" : "recompute");
                         });

EngineOptions WithTpDisk(EngineOptions options, const std::string& path) {
  options.disk_path = path;
  options.disk_kv_bytes = 1 << 20;
  options.load_or_recompute = false;  // every block found on disk is loaded: the test counts hits
  return options;
}

TEST(TensorParallelEngineTest, PrefixesCrossDegreesThroughTheDiskTier) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/kvtier_tp_", getpid(), ".kvdisk");
  const std::vector<std::vector<int32_t>> prompt = {Prompt(7, 24)};  // 6 full blocks of 4 tokens
  const TpRun tp2_alone = RunTp(TpOptions(2), prompt, 6);

  // TP = 1 (sharded plan: the same K/V bits as TP = 2) writes; TP = 2 and 4 read its blocks.
  std::filesystem::remove(path);
  const TpRun tp1_write = RunTp(WithTpDisk(TpOptions(1), path), prompt, 6);
  EXPECT_EQ(testing::Stat(tp1_write.stats, "prefix_hits", "disk"), 0);
  for (int32_t degree : {2, 4}) {
    const TpRun read = RunTp(WithTpDisk(TpOptions(degree), path), prompt, 6);
    EXPECT_GT(testing::Stat(read.stats, "prefix_hits", "disk"), 0) << "tensor_parallel " << degree;
    EXPECT_EQ(read.tokens, tp2_alone.tokens) << "tensor_parallel " << degree;
  }

  // And back: TP = 2 writes a fresh file, the plain TP = 1 forward reads it.
  std::filesystem::remove(path);
  const TpRun tp2_write = RunTp(WithTpDisk(TpOptions(2), path), prompt, 6);
  EXPECT_EQ(tp2_write.tokens, tp2_alone.tokens);
  const TpRun plain_read = RunTp(WithTpDisk(TpOptions(0), path), prompt, 6);
  EXPECT_GT(testing::Stat(plain_read.stats, "prefix_hits", "disk"), 0);
  EXPECT_EQ(plain_read.tokens, tp2_alone.tokens);
  std::filesystem::remove(path);
}

TEST(TensorParallelEngineTest, OptionsAreValidated) {
  EngineOptions options = testing::CpuOptions();
  options.tensor_parallel = 6;
  EXPECT_NE(options.Validate().message().find("tensor_parallel must be 1, 2, 4 or 8, got 6"), std::string::npos);
  options.tensor_parallel = 2;
  options.devices = {0, 0};
  EXPECT_NE(options.Validate().message().find("devices names one GPU twice"), std::string::npos);
  options.devices = {1, 0};
  EXPECT_TRUE(options.Validate().ok());
  options.tensor_parallel = 8;  // the model has 4 KV heads
  options.devices.clear();
  auto engine = Engine::Create(testing::SharedCheckpoint(ShardableModel()), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("num_key_value_heads (4) is not divisible"), std::string::npos)
      << engine.status();
}

}  // namespace
}  // namespace kvtier
