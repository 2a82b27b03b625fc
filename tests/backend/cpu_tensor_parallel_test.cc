// Tests of the CPU backend's tensor-parallel plan (backend/cpu/sharded_forward.h): at
// TP = 1 (sharded_reduction), 2, 4 and 8 the logits and the KV blocks are the same bits,
// for every architecture, weight format and KV format; TP = 2 stays within rounding of the plain
// forward; shapes and options that cannot split are refused by name.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/sharded_forward.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

constexpr int64_t kBlockTokens = 4;
constexpr int64_t kNumBlocks = 32;

struct PlanCase {
  std::string name;
  RandomCheckpointSpec spec;
  StorageDType weight_dtype = StorageDType::kAuto;
  CpuKernels kernels = CpuKernels::kFast;
  std::vector<int32_t> degrees;  // compared with TP = 1 on the sharded plan
  StorageDType kv_dtype = StorageDType::kAuto;
};
void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

RandomCheckpointSpec Base() {
  RandomCheckpointSpec s;
  s.hidden = 64;
  s.layers = 2;
  s.heads = 8;
  s.kv_heads = 8;
  s.head_dim = 16;
  s.intermediate = 128;
  s.vocab = 300;
  s.max_positions = 64;
  s.seed = 11;
  return s;
}

std::vector<PlanCase> Cases() {
  std::vector<PlanCase> cases;
  RandomCheckpointSpec llama = Base();
  cases.push_back({"llama", llama, StorageDType::kAuto, CpuKernels::kFast, {2, 4, 8}});
  cases.push_back({"llama_reference", llama, StorageDType::kAuto, CpuKernels::kReference, {2, 4, 8}});
  cases.push_back({"llama_bf16", llama, StorageDType::kBf16, CpuKernels::kFast, {2, 4, 8}});
  cases.push_back({"llama_fp8_kv", llama, StorageDType::kAuto, CpuKernels::kFast, {2, 4, 8}, StorageDType::kFp8});
  RandomCheckpointSpec gqa_bias = Base();  // two query heads per KV head, q/k/v/o biases
  gqa_bias.kv_heads = 4;
  gqa_bias.attention_bias = true;
  cases.push_back({"llama_gqa_bias", gqa_bias, StorageDType::kAuto, CpuKernels::kFast, {2, 4}});
  RandomCheckpointSpec qwen2 = Base();
  qwen2.arch = Architecture::kQwen2;
  qwen2.kv_heads = 4;
  qwen2.tie_embeddings = true;
  cases.push_back({"qwen2", qwen2, StorageDType::kAuto, CpuKernels::kFast, {2, 4}});
  RandomCheckpointSpec qwen3 = Base();  // per-head q/k norms
  qwen3.arch = Architecture::kQwen3;
  qwen3.head_dim = 32;
  cases.push_back({"qwen3", qwen3, StorageDType::kAuto, CpuKernels::kFast, {2, 4, 8}});
  RandomCheckpointSpec gemma2 = Base();  // GeGLU, sandwich norms, soft-caps, windows
  gemma2.arch = Architecture::kGemma2;
  gemma2.tie_embeddings = true;
  gemma2.sliding_window = 5;
  gemma2.query_pre_attn_scalar = 24;
  gemma2.attn_logit_softcap = 20.0;
  gemma2.final_logit_softcap = 10.0;
  cases.push_back({"gemma2", gemma2, StorageDType::kAuto, CpuKernels::kFast, {2, 4, 8}});
  RandomCheckpointSpec phi3 = Base();  // fused projections, LongRoPE
  phi3.arch = Architecture::kPhi3;
  phi3.sliding_window = 7;
  phi3.longrope_original_max_positions = 8;
  cases.push_back({"phi3", phi3, StorageDType::kAuto, CpuKernels::kFast, {2, 4, 8}});
  RandomCheckpointSpec q8 = Base();  // o_proj and down_proj chunks of 32 values: whole Q8_0 blocks
  q8.head_dim = 32;
  q8.intermediate = 256;
  cases.push_back({"llama_q8_0", q8, StorageDType::kQ8_0, CpuKernels::kFast, {2, 4, 8}});
  RandomCheckpointSpec q4k = Base();  // chunks of 256 values: whole Q4_K blocks
  q4k.hidden = 256;
  q4k.kv_heads = 2;
  q4k.head_dim = 256;
  q4k.intermediate = 2048;
  cases.push_back({"llama_q4_k", q4k, StorageDType::kQ4_K, CpuKernels::kFast, {2}});
  return cases;
}

const Checkpoint& GetCheckpoint(const std::string& name, const RandomCheckpointSpec& spec) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Checkpoint>>();
  auto it = cache->find(name);
  if (it != cache->end()) return *it->second;
  const std::string dir = absl::StrCat(testing::TempDir(), "/kvtier_cpu_tp_", getpid(), "_", name);
  const absl::Status written = WriteRandomCheckpoint(spec, dir);
  EXPECT_TRUE(written.ok()) << written;
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return *cache->emplace(name, std::move(*checkpoint)).first->second;
}

BackendOptions Options(const PlanCase& c, int32_t degree, bool sharded) {
  BackendOptions options;
  options.num_threads = 2;
  options.block_tokens = kBlockTokens;
  options.cpu_kernels = c.kernels;
  options.weight_dtype = c.weight_dtype;
  options.kv_dtype = c.kv_dtype;
  options.tensor_parallel = degree;
  options.sharded_reduction = sharded;
  return options;
}

std::unique_ptr<CpuBackend> MakeBackend(const Checkpoint& checkpoint, const BackendOptions& options) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(checkpoint, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  EXPECT_TRUE((*backend)->AllocateKvPool(kNumBlocks).ok());
  return std::move(*backend);
}

// What a backend computes over one scenario: two prompts prefilled in one ragged batch
// (the second in two chunks), then decode steps of both; every logits row, and the bytes of
// every block written.
struct Trace {
  std::vector<float> logits;
  std::vector<std::vector<uint8_t>> blocks;
};

Trace RunScenario(CpuBackend& backend, int64_t vocab) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> a(13), b(9);
  for (int32_t& t : a) t = token(rng);
  for (int32_t& t : b) t = token(rng);
  const std::vector<int32_t> table_a = {7, 3, 12, 0, 21, 9};
  const std::vector<int32_t> table_b = {5, 18, 1, 30, 14};
  Trace trace;
  auto run = [&](std::vector<SequenceChunk> chunks) {
    ForwardBatch batch;
    batch.chunks = std::move(chunks);
    std::vector<float> logits;
    const absl::Status status = backend.Forward(batch, &logits);
    EXPECT_TRUE(status.ok()) << status;
    trace.logits.insert(trace.logits.end(), logits.begin(), logits.end());
  };
  const std::span<const int32_t> b_head(b.data(), 4), b_tail(b.data() + 4, 5);
  run({{.tokens = a, .start_position = 0, .block_table = table_a, .need_logits = true},
       {.tokens = b_head, .start_position = 0, .block_table = table_b, .all_logits = true}});
  run({{.tokens = b_tail, .start_position = 4, .block_table = table_b, .need_logits = true}});
  int32_t next_a = a.back(), next_b = b.back();
  for (int64_t step = 0; step < 4; ++step) {
    next_a = (next_a * 31 + 7) % static_cast<int32_t>(vocab);
    next_b = (next_b * 17 + 3) % static_cast<int32_t>(vocab);
    const std::vector<int32_t> ta = {next_a}, tb = {next_b};
    run({{.tokens = ta, .start_position = 13 + step, .block_table = table_a, .need_logits = true},
         {.tokens = tb, .start_position = 9 + step, .block_table = table_b, .need_logits = true}});
  }
  const size_t block_bytes = backend.kv_layout().BlockBytes();
  for (const std::vector<int32_t>* table : {&table_a, &table_b}) {
    for (int32_t block : *table) {
      const auto* data = reinterpret_cast<const uint8_t*>(backend.BlockData(block));
      trace.blocks.emplace_back(data, data + block_bytes);
    }
  }
  return trace;
}

// The greedy token of each logits row.
std::vector<int64_t> Argmax(const std::vector<float>& logits, int64_t vocab) {
  std::vector<int64_t> tokens;
  for (size_t row = 0; row * vocab < logits.size(); ++row) {
    const float* r = logits.data() + row * vocab;
    tokens.push_back(std::max_element(r, r + vocab) - r);
  }
  return tokens;
}

class ShardedPlanTest : public testing::TestWithParam<PlanCase> {
 protected:
  const Checkpoint& checkpoint() { return GetCheckpoint(GetParam().name, GetParam().spec); }
  int64_t vocab() { return checkpoint().config().vocab_size; }
};

TEST_P(ShardedPlanTest, EveryDegreeGivesTheBitsOfTp1) {
  std::unique_ptr<CpuBackend> tp1 = MakeBackend(checkpoint(), Options(GetParam(), 1, true));
  ASSERT_NE(tp1, nullptr);
  EXPECT_NE(tp1->compute_path().find("tensor parallel 1 (sharded plan)"), std::string::npos) << tp1->compute_path();
  const Trace want = RunScenario(*tp1, vocab());
  for (int32_t degree : GetParam().degrees) {
    SCOPED_TRACE(absl::StrCat("tensor_parallel ", degree));
    std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint(), Options(GetParam(), degree, false));
    ASSERT_NE(backend, nullptr);
    const Trace got = RunScenario(*backend, vocab());
    ASSERT_EQ(got.logits.size(), want.logits.size());
    EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0);
    EXPECT_EQ(got.blocks, want.blocks);  // each rank wrote its heads where TP=1 writes them
  }
}

TEST_P(ShardedPlanTest, Tp2IsWithinRoundingOfThePlainForward) {
  std::unique_ptr<CpuBackend> plain = MakeBackend(checkpoint(), Options(GetParam(), 1, false));
  std::unique_ptr<CpuBackend> tp2 = MakeBackend(checkpoint(), Options(GetParam(), 2, false));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(tp2, nullptr);
  EXPECT_EQ(plain->compute_path().find("sharded"), std::string::npos);
  const Trace want = RunScenario(*plain, vocab());
  const Trace got = RunScenario(*tp2, vocab());
  ASSERT_EQ(got.logits.size(), want.logits.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.logits.size(); ++i) {
    diff = std::max(diff, std::abs(double(got.logits[i]) - want.logits[i]));
    scale = std::max(scale, std::abs(double(want.logits[i])));
  }
  // Only the order of the o_proj and down_proj sums differs. The block formats quantize
  // each activation to int8 (per block, the same blocks in both plans), so a last-bit
  // difference of the residual stream can move a value to the next int8 step: up to a
  // step's share of the output (Q4_K measured 0.7% here), not a float rounding.
  const bool int8_activations = IsBlockStorageDType(GetParam().weight_dtype) && GetParam().kernels == CpuKernels::kFast;
  EXPECT_LT(diff / scale, int8_activations ? 2e-2 : 1e-4);
  EXPECT_EQ(Argmax(got.logits, vocab()), Argmax(want.logits, vocab()));
  if (GetParam().kernels == CpuKernels::kReference) {
    EXPECT_GT(diff, 0.0) << "the sharded plan should sum in another order than the plain one";
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, ShardedPlanTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<PlanCase>& info) { return info.param.name; });

TEST(SumPairwiseTree, SumsInTheTreeOrderAtEveryLevel) {
  // Values whose sum depends on the order: ((a+b)+(c+d)) differs from ((a+b)+c)+d.
  std::vector<std::vector<float>> values = {{1e8f}, {1.0f}, {-1e8f}, {1.0f}, {0.5f}, {0.25f}, {3.0f}, {-3.0f}};
  std::vector<float*> buffers;
  for (std::vector<float>& v : values) buffers.push_back(v.data());
  ThreadPool pool(2);
  SumPairwiseTree(buffers, 1, &pool);
  const float want = ((1e8f + 1.0f) + (-1e8f + 1.0f)) + ((0.5f + 0.25f) + (3.0f + -3.0f));
  EXPECT_EQ(values[0][0], want);
}

// A backend that refuses: the status of creating it.
absl::Status CreateStatus(const RandomCheckpointSpec& spec, const std::string& name, const BackendOptions& options,
                          const std::string& backend = "cpu") {
  return CreateBackend(backend, GetCheckpoint(name, spec), options).status();
}

TEST(ShardedPlanRefuses, ShapesThatDoNotSplit) {
  BackendOptions options;
  options.num_threads = 1;
  options.tensor_parallel = 3;
  absl::Status status = CreateStatus(Base(), "llama", options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("tensor_parallel must be 1, 2, 4 or 8"), std::string::npos) << status;

  RandomCheckpointSpec gqa = Base();
  gqa.kv_heads = 2;
  options.tensor_parallel = 4;
  status = CreateStatus(gqa, "gqa2", options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("num_key_value_heads (2)"), std::string::npos) << status;

  RandomCheckpointSpec odd_mlp = Base();
  odd_mlp.intermediate = 100;
  options.tensor_parallel = 8;
  status = CreateStatus(odd_mlp, "mlp100", options);
  EXPECT_NE(status.message().find("intermediate_size (100)"), std::string::npos) << status;

  // o_proj is Q4_K (256 columns), but its chunks of 32 columns are not whole blocks.
  RandomCheckpointSpec q4 = Base();
  q4.head_dim = 32;
  options.tensor_parallel = 2;
  options.weight_dtype = StorageDType::kQ4_K;
  status = CreateStatus(q4, "q4_misaligned", options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("o_proj has 256 input columns"), std::string::npos) << status;
}

TEST(ShardedPlanRefuses, MixtureOfExpertsAndCuda) {
  RandomCheckpointSpec moe = Base();
  moe.arch = Architecture::kMixtral;
  moe.moe.experts = 4;
  moe.moe.top_k = 2;
  BackendOptions options;
  options.num_threads = 1;
  options.tensor_parallel = 2;
  absl::Status status = CreateStatus(moe, "mixtral", options);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("mixture-of-experts"), std::string::npos) << status;
  options.tensor_parallel = 1;
  options.sharded_reduction = true;
  status = CreateStatus(moe, "mixtral", options);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;

  // The CUDA backend does not run TP = 1 in place of the ranks asked for.
  BackendOptions cuda;
  cuda.tensor_parallel = 2;
  status = CreateStatus(Base(), "llama", cuda, "cuda");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("not yet implemented"), std::string::npos) << status;
  cuda.devices = {0};
  status = CreateStatus(Base(), "llama", cuda, "cuda");
  EXPECT_NE(status.message().find("devices names 1 GPUs, tensor_parallel is 2"), std::string::npos) << status;
}

}  // namespace
}  // namespace kvtier
