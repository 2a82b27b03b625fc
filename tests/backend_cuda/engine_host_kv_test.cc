// A long sequence through the engine on the CUDA backend (docs/LONG_CONTEXT.md): a device
// tier of a few blocks, so most of the sequence's KV lives on the host tier and every step
// streams it (cuda host_kv_stream_tokens). Against the same run with an unlimited device
// tier: the same greedy tokens and, token by token, log-probabilities within the KV format's
// bound; VerifyIntegrity after every step; cancelling the long sequence mid-stream leaks no
// block and leaves a short sequence beside it unchanged. bf16 and fp8 KV. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_prompts.h"
#include "testing/test_model.h"

namespace kvtier {
namespace {

using testing::Greedy;
using testing::OpenCheckpoint;
using testing::Prompt;

constexpr int64_t kBlockTokens = 16;
// The whole sequence's KV fits the staging of one step (positions).
constexpr int64_t kStreamTokens = 4096;

// A small Llama shape the fast attention kernels take (head_dim 64), bf16 weights.
std::string ModelDir() {
  auto spec = RandomCheckpointPreset("small-llama");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->seed = 5;
  spec->head_dim = 64;
  spec->heads = 4;
  spec->kv_heads = 1;
  spec->dtype = DType::kBF16;
  spec->max_positions = std::max<int64_t>(spec->max_positions, 2048);
  return testing::WriteTestModel("engine-host-kv-small-llama", *spec);
}

// Greedy, with each token's log-probability.
SamplingParams GreedyWithLogprob(int max_new) {
  SamplingParams p = Greedy(max_new);
  p.logprobs = 0;
  return p;
}

struct Tokens {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::string error;  // why the engine failed the sequence, if it did
};

class EngineHostKvTest : public ::testing::TestWithParam<StorageDType> {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }

  EngineOptions Unlimited() const {
    EngineOptions options;
    options.backend = "cuda";
    options.block_tokens = kBlockTokens;
    options.gpu_kv_bytes = 256 << 20;
    options.kv_dtype = GetParam();
    // The same prefill chunks in both runs: a chunk's projections may round differently
    // with another number of rows.
    options.max_tokens_per_step = 128;
    return options;
  }

  std::unique_ptr<Engine> MakeEngine(const EngineOptions& options) {
    auto engine = Engine::Create(OpenCheckpoint(ModelDir()), options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // `device_blocks` on the device tier, `host_blocks` on the host tier, streaming on.
  EngineOptions SmallDevice(int64_t device_blocks, int64_t host_blocks) {
    EngineOptions options = Unlimited();
    if (block_bytes_ == 0) {
      auto probe = MakeEngine(Unlimited());
      if (probe == nullptr) return options;
      block_bytes_ = static_cast<int64_t>(probe->backend().kv_layout().BlockBytes());
    }
    options.gpu_kv_bytes = block_bytes_ * device_blocks;
    options.host_kv_bytes = block_bytes_ * host_blocks;
    options.watermark_blocks = 0;
    options.cuda.host_kv_stream_tokens = kStreamTokens;
    return options;
  }

  int64_t block_bytes_ = 0;
};

void StepAndVerify(Engine& engine, std::map<SequenceId, Tokens>* out) {
  std::vector<StepEvent> events;
  const absl::Status stepped = engine.Step(&events);
  ASSERT_TRUE(stepped.ok()) << stepped;
  const absl::Status verified = engine.VerifyIntegrity();
  ASSERT_TRUE(verified.ok()) << verified;
  for (const StepEvent& e : events) {
    if (e.finish == FinishReason::kError) {
      (void)engine.ReadSequence(e.sequence, [&](const Sequence& seq) { (*out)[e.sequence].error = seq.error; });
    }
    if (!e.token) continue;
    (*out)[e.sequence].ids.push_back(*e.token);
    (*out)[e.sequence].logprobs.push_back(e.logprobs ? e.logprobs->logprob : NAN);
  }
}

std::map<SequenceId, Tokens> RunToEnd(Engine& engine) {
  std::map<SequenceId, Tokens> out;
  for (int i = 0; i < 5000 && engine.NumUnfinished() > 0; ++i) {
    StepAndVerify(engine, &out);
    if (::testing::Test::HasFatalFailure()) break;
  }
  EXPECT_EQ(engine.NumUnfinished(), 0);
  return out;
}

int64_t Stat(Engine& engine, const std::string& name) { return engine.Stats()[name].get<int64_t>(); }
int64_t CopyStat(Engine& engine, const std::string& name) {
  return engine.Stats()["backend_copies"][name].get<int64_t>();
}
int64_t TierStat(Engine& engine, const std::string& tier, const std::string& name) {
  return engine.Stats()["tiers"][tier][name].get<int64_t>();
}

// Log-probabilities of the same tokens: the streamed step reads the same KV bytes as the
// all-on-device one, but the engine's two runs may chunk the prompt differently; the bound
// is the KV format's rounding, not an exact match.
double MaxLogprobDifference(const Tokens& a, const Tokens& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.logprobs.size(), b.logprobs.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a.logprobs[i]) - b.logprobs[i]));
  }
  return worst;
}

TEST_P(EngineHostKvTest, LongSequenceMatchesAnUnlimitedDeviceTier) {
  const std::vector<int32_t> prompt = Prompt(11, 700);
  constexpr int kNew = 40;
  Tokens want;
  {
    auto reference = MakeEngine(Unlimited());
    ASSERT_NE(reference, nullptr);
    const SequenceId id = *reference->Add(prompt, GreedyWithLogprob(kNew));
    want = RunToEnd(*reference)[id];
  }
  ASSERT_EQ(want.ids.size(), static_cast<size_t>(kNew));
  constexpr int64_t kDevice = 8;  // of the sequence's 47 blocks
  const int64_t total_blocks = (static_cast<int64_t>(prompt.size()) + kNew + kBlockTokens - 1) / kBlockTokens;
  auto engine = MakeEngine(SmallDevice(kDevice, total_blocks + 8));
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->backend().ReadsHostResidentKv());
  absl::StatusOr<SequenceId> id = engine->Add(prompt, GreedyWithLogprob(kNew));
  ASSERT_TRUE(id.ok()) << id.status();
  const Tokens got = RunToEnd(*engine)[*id];
  EXPECT_EQ(got.ids, want.ids) << got.error << "\n" << engine->Stats().dump();
  const double diff = MaxLogprobDifference(got, want);
  std::printf("[%s] %d tokens, max |logprob difference| %.3g, %lld host-KV steps\n",
              GetParam() == StorageDType::kFp8 ? "fp8" : "bf16", kNew, diff,
              static_cast<long long>(CopyStat(*engine, "host_kv_steps")));
  EXPECT_LT(diff, GetParam() == StorageDType::kFp8 ? 0.1 : 0.05);
  EXPECT_GE(Stat(*engine, "blocks_moved_to_host"), total_blocks - kDevice);
  EXPECT_GE(CopyStat(*engine, "host_kv_steps"), kNew - 1);
  EXPECT_LE(TierStat(*engine, "gpu", "peak_bytes"), kDevice * block_bytes_);
  EXPECT_EQ(TierStat(*engine, "gpu", "used_bytes"), 0);
  EXPECT_EQ(TierStat(*engine, "host", "used_bytes"), 0);
}

TEST_P(EngineHostKvTest, CancelMidStreamLosesNothing) {
  const std::vector<int32_t> long_prompt = Prompt(21, 500);
  const std::vector<int32_t> other_prompt = Prompt(22, 40);
  Tokens long_want, other_want;
  {
    auto reference = MakeEngine(Unlimited());
    ASSERT_NE(reference, nullptr);
    const SequenceId a = *reference->Add(long_prompt, GreedyWithLogprob(24));
    const SequenceId b = *reference->Add(other_prompt, GreedyWithLogprob(20));
    auto out = RunToEnd(*reference);
    long_want = out[a];
    other_want = out[b];
  }
  auto engine = MakeEngine(SmallDevice(10, 60));
  ASSERT_NE(engine, nullptr);
  const SequenceId long_id = *engine->Add(long_prompt, GreedyWithLogprob(24));
  const SequenceId other = *engine->Add(other_prompt, GreedyWithLogprob(20));
  std::map<SequenceId, Tokens> out;
  // Until the long sequence streams host-resident KV while decoding.
  for (int i = 0; i < 500 && (CopyStat(*engine, "host_kv_steps") == 0 || out[long_id].ids.size() < 4); ++i) {
    StepAndVerify(*engine, &out);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  ASSERT_GT(CopyStat(*engine, "host_kv_steps"), 0);
  ASSERT_TRUE(engine->Cancel(long_id).ok());
  auto rest = RunToEnd(*engine);
  Tokens& o = out[other];
  o.ids.insert(o.ids.end(), rest[other].ids.begin(), rest[other].ids.end());
  o.logprobs.insert(o.logprobs.end(), rest[other].logprobs.begin(), rest[other].logprobs.end());
  EXPECT_EQ(o.ids, other_want.ids) << o.error;
  EXPECT_TRUE(rest[long_id].ids.empty());
  EXPECT_EQ(TierStat(*engine, "gpu", "used_bytes"), 0);
  EXPECT_EQ(TierStat(*engine, "host", "used_bytes"), 0);
  // The same long prompt again, from what the cancelled run left cached: the same tokens.
  const SequenceId again = *engine->Add(long_prompt, GreedyWithLogprob(24));
  const Tokens again_got = RunToEnd(*engine)[again];
  EXPECT_EQ(again_got.ids, long_want.ids) << again_got.error;
}

INSTANTIATE_TEST_SUITE_P(KvFormats, EngineHostKvTest, ::testing::Values(StorageDType::kBf16, StorageDType::kFp8),
                         [](const ::testing::TestParamInfo<StorageDType>& info) {
                           return info.param == StorageDType::kFp8 ? std::string("fp8") : std::string("bf16");
                         });

}  // namespace
}  // namespace kvtier
