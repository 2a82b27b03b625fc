// Long sequences (docs/LONG_CONTEXT.md) on the CPU backend: sequences 2-10x longer than the
// device tier, their older blocks read from the host tier in place, produce exactly the
// tokens of a run with an unlimited device tier — alone, beside sequences being swapped and
// sharing a prefix — with the engine's invariants checked after every step; cancelling one
// mid-stream leaks nothing and disturbs no one; admission refuses only what the device and
// host tiers together cannot hold, and, where the backend reads no host-resident KV, what
// the device tier cannot, saying why. With kv_dtype fp8 the host-resident blocks hold codes and
// row scales, and the tokens are still those of the fp8 run with an unlimited device tier.
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_runs.h"
#include "testing/forwarding_backend.h"

namespace kvtier {
namespace {

using testing::Greedy;
using testing::MakeEngine;
using testing::Prompt;

constexpr int64_t kBlockTokens = 4;

EngineOptions Unlimited(StorageDType kv_dtype = StorageDType::kAuto) {
  EngineOptions options = testing::CpuOptions(kBlockTokens);
  options.kv_dtype = kv_dtype;
  return options;
}

// A block's bytes in the KV format (fp8 blocks are about a quarter of f32 ones).
int64_t BlockBytes(StorageDType kv_dtype = StorageDType::kAuto) {
  auto bytes = [](StorageDType dtype) {
    return static_cast<int64_t>(MakeEngine(Unlimited(dtype))->backend().kv_layout().BlockBytes());
  };
  static const int64_t f32 = bytes(StorageDType::kAuto);
  static const int64_t fp8 = bytes(StorageDType::kFp8);
  return kv_dtype == StorageDType::kFp8 ? fp8 : f32;
}

// A small device tier (`device_blocks`) over a larger host tier.
EngineOptions SmallDevice(int64_t device_blocks, int64_t host_blocks, StorageDType kv_dtype = StorageDType::kAuto) {
  EngineOptions options = Unlimited(kv_dtype);
  const int64_t block_bytes = BlockBytes(kv_dtype);
  options.gpu_kv_bytes = block_bytes * device_blocks;
  options.host_kv_bytes = block_bytes * host_blocks;
  options.watermark_blocks = 0;
  options.max_tokens_per_step = 64;
  return options;
}

// Every step checks every invariant of the scheduler and the KV manager.
std::map<SequenceId, std::vector<int32_t>> RunChecked(Engine& engine) { return testing::RunToEnd(engine, /*verify=*/true); }

std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_new,
                               StorageDType kv_dtype = StorageDType::kAuto) {
  auto engine = MakeEngine(Unlimited(kv_dtype));
  const SequenceId id = *engine->Add(prompt, Greedy(max_new));
  return RunChecked(*engine)[id];
}

int64_t Stat(Engine& engine, const std::string& name) { return testing::Stat(engine.Stats(), name); }
int64_t TierStat(Engine& engine, const std::string& tier, const std::string& name) {
  return testing::Stat(engine.Stats(), "tiers", tier, name);
}

// (device blocks, prompt tokens, new tokens, KV format): the whole sequence is 2x to 10x
// the tier.
struct LongCase {
  int64_t device_blocks;
  int prompt;
  int max_new;
  StorageDType kv_dtype = StorageDType::kAuto;
};
void PrintTo(const LongCase& c, std::ostream* os) {
  *os << c.device_blocks << " device blocks, " << c.prompt << " + " << c.max_new << " tokens, KV "
      << (c.kv_dtype == StorageDType::kFp8 ? "fp8" : "f32");
}
class LongAloneTest : public ::testing::TestWithParam<LongCase> {};

TEST_P(LongAloneTest, MatchesAnUnlimitedDeviceTier) {
  const LongCase c = GetParam();
  const std::vector<int32_t> prompt = Prompt(31, c.prompt);
  const std::vector<int32_t> want = Reference(prompt, c.max_new, c.kv_dtype);
  ASSERT_EQ(want.size(), static_cast<size_t>(c.max_new));
  const int64_t total_blocks = (c.prompt + c.max_new + kBlockTokens - 1) / kBlockTokens;
  auto engine = MakeEngine(SmallDevice(c.device_blocks, total_blocks + 8, c.kv_dtype));
  ASSERT_EQ(engine->backend().kv_layout().dtype, c.kv_dtype == StorageDType::kFp8 ? DType::kF8E4M3 : DType::kF32);
  absl::StatusOr<SequenceId> id = engine->Add(prompt, Greedy(c.max_new));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(RunChecked(*engine)[*id], want);
  // Most of it lived on the host; the device tier never held more than its size.
  EXPECT_GE(Stat(*engine, "blocks_moved_to_host"), total_blocks - c.device_blocks);
  EXPECT_LE(TierStat(*engine, "gpu", "peak_bytes"), c.device_blocks * BlockBytes(c.kv_dtype));
  EXPECT_EQ(TierStat(*engine, "gpu", "used_bytes"), 0);
  EXPECT_EQ(TierStat(*engine, "host", "used_bytes"), 0);
}

INSTANTIATE_TEST_SUITE_P(Ratios, LongAloneTest,
                         ::testing::Values(LongCase{8, 50, 14},    // 16 blocks: 2x
                                           LongCase{6, 60, 30},    // 23 blocks: ~4x
                                           LongCase{4, 130, 30},   // 40 blocks: 10x
                                           LongCase{8, 50, 14, StorageDType::kFp8},
                                           LongCase{4, 130, 30, StorageDType::kFp8}),
                         [](const ::testing::TestParamInfo<LongCase>& info) {
                           return "device" + std::to_string(info.param.device_blocks) + "_tokens" +
                                  std::to_string(info.param.prompt + info.param.max_new) +
                                  (info.param.kv_dtype == StorageDType::kFp8 ? "_fp8" : "");
                         });

TEST(LongContextTest, BesideSwappedSequencesEveryoneMatches) {
  const std::vector<int32_t> long_prompt = Prompt(41, 90);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(Prompt(50 + i, 6 + 2 * i));
  const std::vector<int32_t> long_want = Reference(long_prompt, 20);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(Reference(p, 16));

  EngineOptions options = SmallDevice(12, 80);  // long: 28 blocks; the others up to 8 each
  options.preemption = PreemptionMode::kSwap;
  auto engine = MakeEngine(options);
  std::vector<SequenceId> ids;
  for (const auto& p : prompts) ids.push_back(*engine->Add(p, Greedy(16)));
  const SequenceId long_id = *engine->Add(long_prompt, Greedy(20));
  auto out = RunChecked(*engine);
  EXPECT_EQ(out[long_id], long_want);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(out[ids[i]], want[i]) << "sequence " << i;
  EXPECT_GT(Stat(*engine, "swaps_out"), 0);
  EXPECT_GT(Stat(*engine, "blocks_moved_to_host"), 0);
  EXPECT_EQ(TierStat(*engine, "gpu", "used_bytes"), 0);
  EXPECT_EQ(TierStat(*engine, "host", "used_bytes"), 0);
}

TEST(LongContextTest, TwoLongSequencesTakeTurnsAndReuseTheirPrefix) {
  // Two long sequences with a common 48-token prefix; one runs at a time (max_long_running
  // 1), the second reuses the prefix blocks the first left in the cache.
  std::vector<int32_t> first = Prompt(61, 70);
  std::vector<int32_t> second(first.begin(), first.begin() + 48);
  const std::vector<int32_t> tail = Prompt(62, 30);
  second.insert(second.end(), tail.begin(), tail.end());
  const std::vector<int32_t> first_want = Reference(first, 12);
  const std::vector<int32_t> second_want = Reference(second, 12);
  auto engine = MakeEngine(SmallDevice(6, 120));
  const SequenceId a = *engine->Add(first, Greedy(12));
  const SequenceId b = *engine->Add(second, Greedy(12));
  auto out = RunChecked(*engine);
  EXPECT_EQ(out[a], first_want);
  EXPECT_EQ(out[b], second_want);
  EXPECT_GT(engine->Stats()["prefix_hit_tokens"].get<int64_t>(), 0);
}

TEST(LongContextTest, CancelMidStreamLosesNothing) {
  const std::vector<int32_t> long_prompt = Prompt(71, 80);
  const std::vector<int32_t> other_prompt = Prompt(72, 10);
  const std::vector<int32_t> long_want = Reference(long_prompt, 20);
  const std::vector<int32_t> other_want = Reference(other_prompt, 14);  // 6 blocks: not long
  auto engine = MakeEngine(SmallDevice(8, 60));
  const SequenceId long_id = *engine->Add(long_prompt, Greedy(20));
  const SequenceId other = *engine->Add(other_prompt, Greedy(14));
  std::map<SequenceId, std::vector<int32_t>> out;
  // Until some of the long sequence lives on the host and it is decoding.
  for (int i = 0; i < 200 && (Stat(*engine, "blocks_moved_to_host") == 0 || out[long_id].size() < 3); ++i) {
    testing::StepAndCollect(*engine, &out, /*verify=*/true);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  ASSERT_GT(Stat(*engine, "blocks_moved_to_host"), 0);
  ASSERT_TRUE(engine->Cancel(long_id).ok());
  auto rest = RunChecked(*engine);
  out[other].insert(out[other].end(), rest[other].begin(), rest[other].end());
  EXPECT_EQ(out[other], other_want);
  EXPECT_TRUE(rest[long_id].empty());
  EXPECT_EQ(TierStat(*engine, "gpu", "used_bytes"), 0);
  EXPECT_EQ(TierStat(*engine, "host", "used_bytes"), 0);
  // The same prompt again, from what the cancelled run left cached: the same tokens.
  const SequenceId again = *engine->Add(long_prompt, Greedy(20));
  EXPECT_EQ(RunChecked(*engine)[again], long_want);
}

TEST(LongContextTest, AdmissionRefusesOnlyWhatNoTiersCanHold) {
  auto engine = MakeEngine(SmallDevice(4, 10));  // 14 blocks = 56 positions in all
  auto fits = engine->Add(Prompt(81, 40), Greedy(16));  // 56 positions: device + host
  EXPECT_TRUE(fits.ok()) << fits.status();
  auto too_long = engine->Add(Prompt(82, 41), Greedy(16));
  ASSERT_EQ(too_long.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(too_long.status().message());
  EXPECT_NE(message.find("15 KV blocks"), std::string::npos) << message;
  EXPECT_NE(message.find("device tier has 4 blocks"), std::string::npos) << message;
  EXPECT_NE(message.find("host tier 10 blocks"), std::string::npos) << message;

  EngineOptions no_long = SmallDevice(4, 10);
  no_long.max_long_running = 0;
  auto refusing = MakeEngine(no_long);
  auto refused = refusing->Add(Prompt(81, 40), Greedy(16));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("must fit on the device tier to run (max_long_running is 0)"),
            std::string::npos)
      << refused.status();
  RunChecked(*engine);
}

// A backend that reads no host-resident KV (CUDA with layer groups): long sequences are
// refused with its reason, which names the options that would run them.
class NoHostKvBackend final : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  bool ReadsHostResidentKv() const override { return false; }
  std::string WhyNoHostResidentKv() const override { return "with kv_layer_groups 0 it streams them (test)"; }
};

TEST(LongContextTest, ABackendThatReadsNoHostKvRefusesLongSequencesSayingWhy) {
  EngineOptions options = SmallDevice(4, 10);
  options.wrap_backend = [](std::unique_ptr<Backend> inner) -> std::unique_ptr<Backend> {
    return std::make_unique<NoHostKvBackend>(std::move(inner));
  };
  auto engine = MakeEngine(options);
  auto refused = engine->Add(Prompt(81, 40), Greedy(16));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find(
                "must fit on the device tier to run (with kv_layer_groups 0 it streams them (test))"),
            std::string::npos)
      << refused.status();
  auto fits = engine->Add(Prompt(82, 8), Greedy(4));  // 12 positions: 3 blocks
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(RunChecked(*engine)[*fits], Reference(Prompt(82, 8), 4));
}

}  // namespace
}  // namespace kvtier
