// Tests of CpuBackend on tiny random checkpoints of every supported architecture: the
// forward against an independent double-precision dense implementation (reference_model.h), chunked-prefill
// and batching invariance, block-table independence, batch validation and block copies.
#include "backend/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"
#include "model/tensor.h"
#include "reference_model.h"

namespace kvtier {
namespace {

constexpr int64_t kBlockTokens = 4;
constexpr int64_t kNumBlocks = 64;

struct ArchCase {
  std::string name;
  RandomCheckpointSpec spec;
};
void PrintTo(const ArchCase& c, std::ostream* os) { *os << c.name; }

std::vector<ArchCase> Cases() {
  std::vector<ArchCase> cases;
  RandomCheckpointSpec base;
  base.hidden = 64;
  base.layers = 2;
  base.heads = 4;
  base.kv_heads = 2;
  base.head_dim = 16;
  base.intermediate = 96;
  base.vocab = 300;
  base.max_positions = 64;
  base.seed = 7;

  RandomCheckpointSpec llama = base;  // GQA + llama3 scaling with every frequency regime
  llama.arch = Architecture::kLlama;
  llama.rope_scaling = Llama3RopeScaling{.factor = 4.0, .low_freq_factor = 1.0,
                                         .high_freq_factor = 4.0,
                                         .original_max_position_embeddings = 32};
  cases.push_back({"llama", llama});
  RandomCheckpointSpec llama_bias = llama;  // q/k/v/o biases
  llama_bias.attention_bias = true;
  cases.push_back({"llama_bias", llama_bias});
  RandomCheckpointSpec mistral = base;  // MQA
  mistral.arch = Architecture::kMistral;
  mistral.kv_heads = 1;
  cases.push_back({"mistral", mistral});
  RandomCheckpointSpec qwen2 = base;  // q/k/v bias, tied embeddings
  qwen2.arch = Architecture::kQwen2;
  qwen2.tie_embeddings = true;
  qwen2.rope_theta = 1000000.0;
  cases.push_back({"qwen2", qwen2});
  RandomCheckpointSpec qwen3 = base;  // q/k norm, head_dim * heads != hidden
  qwen3.arch = Architecture::kQwen3;
  qwen3.head_dim = 32;
  qwen3.tie_embeddings = true;
  cases.push_back({"qwen3", qwen3});
  // Windows shorter than the tests' prompts, soft-caps small enough to bend the scores.
  RandomCheckpointSpec gemma2 = base;  // GeGLU, (1 + w) sandwich norms, soft-caps
  gemma2.arch = Architecture::kGemma2;
  gemma2.tie_embeddings = true;
  gemma2.sliding_window = 5;
  gemma2.query_pre_attn_scalar = 24;
  gemma2.attn_logit_softcap = 2.0;
  gemma2.final_logit_softcap = 4.0;
  cases.push_back({"gemma2", gemma2});
  RandomCheckpointSpec gemma3 = base;  // q/k norms, two RoPE bases
  gemma3.arch = Architecture::kGemma3;
  gemma3.tie_embeddings = true;
  gemma3.sliding_window = 6;
  gemma3.rope_theta = 1000000.0;
  gemma3.rope_local_theta = 10.0;
  gemma3.rope_linear_factor = 4.0;
  cases.push_back({"gemma3", gemma3});
  RandomCheckpointSpec phi3 = base;  // fused projections, LongRoPE from position 8
  phi3.arch = Architecture::kPhi3;
  phi3.sliding_window = 7;
  phi3.longrope_original_max_positions = 8;
  cases.push_back({"phi3", phi3});
  // Experts: random routers send the prompts' tokens to different experts, so a prefill
  // runs several experts on gathered rows and a decode step only its chosen ones.
  RandomCheckpointSpec mixtral = base;  // 4 experts, top 2, softmax over the chosen
  mixtral.arch = Architecture::kMixtral;
  mixtral.moe.experts = 4;
  mixtral.moe.top_k = 2;
  cases.push_back({"mixtral", mixtral});
  RandomCheckpointSpec qwen3moe = base;  // 6 experts, top 3, not renormalized; layer 1 dense
  qwen3moe.arch = Architecture::kQwen3Moe;
  qwen3moe.head_dim = 32;
  qwen3moe.moe.experts = 6;
  qwen3moe.moe.top_k = 3;
  qwen3moe.moe.expert_intermediate = 40;
  qwen3moe.moe.norm_topk_prob = false;
  qwen3moe.moe.dense_layers = {1};
  cases.push_back({"qwen3moe", qwen3moe});
  return cases;
}

const Checkpoint& GetCheckpoint(const ArchCase& c) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Checkpoint>>();
  auto it = cache->find(c.name);
  if (it != cache->end()) return *it->second;
  const std::string dir =
      absl::StrCat(testing::TempDir(), "/kvtier_cpu_backend_", getpid(), "_", c.name);
  const absl::Status written = WriteRandomCheckpoint(c.spec, dir);
  EXPECT_TRUE(written.ok()) << written;
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return *cache->emplace(c.name, std::move(*checkpoint)).first->second;
}

std::unique_ptr<CpuBackend> MakeBackend(const Checkpoint& checkpoint, int threads = 2) {
  BackendOptions options;
  options.num_threads = threads;
  options.block_tokens = kBlockTokens;
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(checkpoint, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  EXPECT_TRUE((*backend)->AllocateKvPool(kNumBlocks).ok());
  return std::move(*backend);
}

// An owning chunk; ForwardBatch only holds spans.
struct Chunk {
  std::vector<int32_t> tokens;
  int64_t start = 0;
  std::vector<int32_t> table;
  bool need_logits = true;
};

absl::Status TryRun(Backend& backend, const std::vector<Chunk>& chunks,
                    std::vector<float>* logits) {
  ForwardBatch batch;
  for (const Chunk& c : chunks) {
    batch.chunks.push_back({.tokens = c.tokens, .start_position = c.start,
                            .block_table = c.table, .need_logits = c.need_logits});
  }
  return backend.Forward(batch, logits);
}

std::vector<float> RunBatch(Backend& backend, const std::vector<Chunk>& chunks) {
  std::vector<float> logits;
  const absl::Status status = TryRun(backend, chunks, &logits);
  EXPECT_TRUE(status.ok()) << status;
  return logits;
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

// Hands out distinct block ids in random order.
class BlockIds {
 public:
  explicit BlockIds(std::mt19937& rng) : ids_(kNumBlocks) {
    std::iota(ids_.begin(), ids_.end(), 0);
    std::shuffle(ids_.begin(), ids_.end(), rng);
  }
  std::vector<int32_t> Take(int64_t positions) {
    const int64_t n = (positions + kBlockTokens - 1) / kBlockTokens;
    std::vector<int32_t> table(ids_.end() - n, ids_.end());
    ids_.resize(ids_.size() - n);
    return table;
  }

 private:
  std::vector<int32_t> ids_;
};

// max |a - b| / max |b|.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

class CpuBackendTest : public testing::TestWithParam<ArchCase> {
 protected:
  const Checkpoint& checkpoint() { return GetCheckpoint(GetParam()); }
  int64_t vocab() { return checkpoint().config().vocab_size; }
  std::mt19937 rng_{42};
};

TEST_P(CpuBackendTest, MatchesDoublePrecisionReference) {
  std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint());
  ReferenceModel reference(checkpoint());
  BlockIds ids(rng_);
  std::vector<int32_t> prompt = RandomTokens(13, vocab(), rng_);
  const std::vector<int32_t> table = ids.Take(20);
  std::vector<float> logits = RunBatch(*backend, {{prompt, 0, table}});
  const std::vector<double> want = reference.LastLogits(prompt);
  EXPECT_LT(RelativeError(logits, std::vector<float>(want.begin(), want.end())), 1e-5);

  // A decode step reads the cached K/V.
  prompt.push_back(17);
  logits = RunBatch(*backend, {{{17}, 13, table}});
  const std::vector<double> want_decode = reference.LastLogits(prompt);
  EXPECT_LT(RelativeError(logits, std::vector<float>(want_decode.begin(), want_decode.end())),
            1e-5);
}

TEST_P(CpuBackendTest, ChunkedPrefillMatchesOneForward) {
  std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint());
  BlockIds ids(rng_);
  const std::vector<int32_t> prompt = RandomTokens(13, vocab(), rng_);
  const std::vector<float> full = RunBatch(*backend, {{prompt, 0, ids.Take(13)}});
  for (int64_t piece : {1, 3, 5}) {
    const std::vector<int32_t> table = ids.Take(13);
    std::vector<float> last;
    for (int64_t start = 0; start < 13; start += piece) {
      const int64_t end = std::min<int64_t>(13, start + piece);
      const std::vector<int32_t> piece_tokens(prompt.begin() + start, prompt.begin() + end);
      last = RunBatch(*backend, {{piece_tokens, start, table, end == 13}});
    }
    EXPECT_LT(RelativeError(last, full), 1e-5) << "piece " << piece;
  }
}

TEST_P(CpuBackendTest, RaggedBatchGivesEachSequenceItsSoloLogits) {
  std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint());
  std::unique_ptr<CpuBackend> single_thread = MakeBackend(checkpoint(), 1);
  BlockIds ids(rng_);
  const std::vector<int32_t> a = RandomTokens(10, vocab(), rng_);
  const std::vector<int32_t> b = RandomTokens(7, vocab(), rng_);
  const std::vector<int32_t> c = RandomTokens(6, vocab(), rng_);  // 5 cached + 1 decoded

  // Alone.
  const std::vector<float> a_alone = RunBatch(*backend, {{a, 0, ids.Take(10)}});
  const std::vector<int32_t> c_table = ids.Take(6);
  RunBatch(*backend, {{{c.begin(), c.end() - 1}, 0, c_table, false}});
  const std::vector<float> c_alone = RunBatch(*backend, {{{c.back()}, 5, c_table}});

  // Together: a prefill, a decode and another prefill in one batch.
  const std::vector<int32_t> c_table2 = ids.Take(6);
  RunBatch(*backend, {{{c.begin(), c.end() - 1}, 0, c_table2, false}});
  const std::vector<float> batched =
      RunBatch(*backend, {{b, 0, ids.Take(7)}, {a, 0, ids.Take(10)}, {{c.back()}, 5, c_table2}});
  const int64_t v = vocab();
  ASSERT_EQ(batched.size(), static_cast<size_t>(3 * v));
  EXPECT_LE(RelativeError({batched.begin() + v, batched.begin() + 2 * v}, a_alone), 1e-6);
  EXPECT_LE(RelativeError({batched.begin() + 2 * v, batched.end()}, c_alone), 1e-6);

  // The thread count does not change a bit.
  const std::vector<float> a_one_thread = RunBatch(*single_thread, {{a, 0, ids.Take(10)}});
  EXPECT_EQ(a_one_thread, a_alone);
}

// The default ForwardSampled = Forward + SampleRow per logits row with that row's draw;
// malformed sampling rows are refused before the forward (no KV written).
TEST_P(CpuBackendTest, ForwardSampledSamplesEachRowWithItsDraw) {
  std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint());
  BlockIds ids(rng_);
  const std::vector<int32_t> a = RandomTokens(9, vocab(), rng_);
  const std::vector<int32_t> b = RandomTokens(4, vocab(), rng_);
  const std::vector<Chunk> chunks = {{a, 0, ids.Take(9)}, {b, 0, ids.Take(4)}};
  const std::vector<float> logits = RunBatch(*backend, chunks);
  const std::vector<RowSampling> rows = {{0.9f, 5, 0.8f, 0.37}, {0.0f, 0, 1.0f, 0.0}};
  ForwardBatch batch;
  for (const Chunk& c : chunks) batch.chunks.push_back({c.tokens, c.start, c.table, c.need_logits});
  std::vector<int32_t> tokens;
  ASSERT_TRUE(backend->ForwardSampled(batch, rows, &tokens).ok());
  ASSERT_EQ(tokens.size(), 2u);
  std::vector<std::pair<float, int32_t>> scratch;
  const size_t v = static_cast<size_t>(vocab());
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(tokens[r], SampleRow(std::span<const float>(logits).subspan(r * v, v), rows[r], &scratch));
  }
  std::vector<RowSampling> bad = rows;
  bad[0].u = -0.1;
  EXPECT_EQ(backend->ForwardSampled(batch, bad, &tokens).code(), absl::StatusCode::kInvalidArgument);
  bad = rows;
  bad[1].temperature = -1.0f;
  EXPECT_EQ(backend->ForwardSampled(batch, bad, &tokens).code(), absl::StatusCode::kInvalidArgument);
  bad = rows;
  bad[0].top_k = -2;
  EXPECT_EQ(backend->ForwardSampled(batch, bad, &tokens).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->ForwardSampled(batch, std::span<const RowSampling>(rows).first(1), &tokens).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(CpuBackendTest, BlockTableOrderDoesNotMatter) {
  std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint());
  const std::vector<int32_t> prompt = RandomTokens(15, vocab(), rng_);
  const std::vector<int32_t> in_order = {0, 1, 2, 3};
  BlockIds ids(rng_);
  std::vector<int32_t> shuffled;
  do {
    shuffled = ids.Take(15);
  } while (std::find(shuffled.begin(), shuffled.end(), 0) != shuffled.end() ||
           std::find(shuffled.begin(), shuffled.end(), 1) != shuffled.end() ||
           std::find(shuffled.begin(), shuffled.end(), 2) != shuffled.end() ||
           std::find(shuffled.begin(), shuffled.end(), 3) != shuffled.end());
  const std::vector<float> first = RunBatch(*backend, {{prompt, 0, in_order}});
  const std::vector<float> second = RunBatch(*backend, {{prompt, 0, shuffled}});
  EXPECT_EQ(first, second);
  // The blocks hold the same bytes.
  for (size_t j = 0; j < in_order.size(); ++j) {
    EXPECT_EQ(std::memcmp(backend->BlockData(in_order[j]), backend->BlockData(shuffled[j]),
                          backend->kv_layout().BlockBytes()),
              0);
  }
}

std::vector<float> SnapshotPool(CpuBackend& backend) {
  const size_t block_floats = backend.kv_layout().BlockBytes() / sizeof(float);
  std::vector<float> pool(kNumBlocks * block_floats);
  std::vector<BlockCopy> copies;
  for (int32_t b = 0; b < kNumBlocks; ++b) copies.push_back({b, pool.data() + b * block_floats});
  EXPECT_TRUE(backend.CopyBlocksToHost(copies).ok());
  return pool;
}

TEST_P(CpuBackendTest, RejectsMalformedBatchWithoutWritingKv) {
  std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint());
  const int32_t v = static_cast<int32_t>(vocab());
  const int64_t max_positions = checkpoint().config().max_position_embeddings;
  const Chunk good{{1, 2, 3, 4, 5}, 0, {10, 11}};
  const std::vector<int32_t> long_table(max_positions / kBlockTokens + 1, 20);
  std::vector<int32_t> distinct_long_table(long_table.size());
  std::iota(distinct_long_table.begin(), distinct_long_table.end(), 20);
  struct Bad {
    Chunk chunk;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {{{1, v, 3}, 0, {30}}, "out of range"},
      {{{1, -1}, 0, {30}}, "out of range"},
      {{{1, 2, 3, 4, 5}, 0, {30}}, "block table"},
      {{{1}, 8, {30, 31}}, "block table"},
      {{{1, 2}, 0, {kNumBlocks}}, "block id"},
      {{{1, 2}, 0, {-1}}, "block id"},
      {{{}, 0, {30}}, "no tokens"},
      {{{1}, -1, {30}}, "negative"},
      {{{1, 2}, max_positions - 1, distinct_long_table}, "max_position_embeddings"},
      {{{1, 2}, 0, {11}}, "written twice"},  // chunk 0 writes block 11 too
  };
  const std::vector<float> before = SnapshotPool(*backend);
  for (const Bad& b : bad) {
    std::vector<float> logits = {1.0f};
    const absl::Status status = TryRun(*backend, {good, b.chunk}, &logits);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b.message;
    EXPECT_NE(status.message().find("chunk 1"), std::string::npos) << status;
    EXPECT_NE(status.message().find(b.message), std::string::npos) << status;
  }
  EXPECT_EQ(SnapshotPool(*backend), before);
  // The same batch without the bad chunk runs.
  EXPECT_EQ(RunBatch(*backend, {good}).size(), static_cast<size_t>(vocab()));
}

TEST_P(CpuBackendTest, BlockCopiesMoveWholeBlocks) {
  std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint());
  const std::vector<int32_t> prompt = RandomTokens(8, vocab(), rng_);
  RunBatch(*backend, {{prompt, 0, {5, 9}}});
  const size_t bytes = backend->kv_layout().BlockBytes();
  std::vector<uint8_t> host(2 * bytes);
  const std::vector<BlockCopy> out = {{5, host.data()}, {9, host.data() + bytes}};
  ASSERT_TRUE(backend->CopyBlocksToHost(out).ok());
  EXPECT_EQ(std::memcmp(host.data(), backend->BlockData(5), bytes), 0);
  const std::vector<BlockCopy> in = {{40, host.data()}, {41, host.data() + bytes}};
  ASSERT_TRUE(backend->CopyBlocksFromHost(in).ok());
  ASSERT_TRUE(backend->CopyBlock(9, 42).ok());
  EXPECT_EQ(std::memcmp(backend->BlockData(40), backend->BlockData(5), bytes), 0);
  EXPECT_EQ(std::memcmp(backend->BlockData(42), backend->BlockData(9), bytes), 0);

  // A decode over the moved blocks equals one over the originals.
  std::vector<float> original = RunBatch(*backend, {{{3}, 8, {5, 9, 12}}});
  std::vector<float> moved = RunBatch(*backend, {{{3}, 8, {40, 41, 13}}});
  EXPECT_EQ(original, moved);

  const std::vector<BlockCopy> bad_id = {{kNumBlocks, host.data()}};
  EXPECT_EQ(backend->CopyBlocksToHost(bad_id).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->CopyBlocksFromHost(bad_id).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<BlockCopy> null_host = {{1, nullptr}};
  EXPECT_EQ(backend->CopyBlocksToHost(null_host).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->CopyBlock(-1, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->CopyBlock(2, kNumBlocks).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(CpuBackendTest, PoolAllocationAndAccounting) {
  BackendOptions options;
  options.block_tokens = kBlockTokens;
  absl::StatusOr<std::unique_ptr<CpuBackend>> created = CpuBackend::Create(checkpoint(), options);
  ASSERT_TRUE(created.ok()) << created.status();
  CpuBackend& backend = **created;
  EXPECT_EQ(backend.name(), "cpu");
  EXPECT_EQ(backend.vocab_size(), vocab());
  const KvLayout& layout = backend.kv_layout();
  const ModelConfig& config = checkpoint().config();
  EXPECT_EQ(layout.num_layers, config.num_layers);
  EXPECT_EQ(layout.num_kv_heads, config.num_kv_heads);
  EXPECT_EQ(layout.head_dim, config.head_dim);
  EXPECT_EQ(layout.block_tokens, kBlockTokens);
  EXPECT_EQ(layout.dtype, DType::kF32);

  std::vector<float> logits;
  EXPECT_EQ(TryRun(backend, {{{1}, 0, {0}}}, &logits).code(),
            absl::StatusCode::kFailedPrecondition);
  const absl::Status absurd = backend.AllocateKvPool(int64_t{1} << 30);
  EXPECT_EQ(absurd.code(), absl::StatusCode::kResourceExhausted) << absurd;
  EXPECT_EQ(backend.AllocateKvPool(0).code(), absl::StatusCode::kInvalidArgument);

  const int64_t before = backend.device_bytes_in_use();
  EXPECT_GE(before, config.NumParameters() * 4);
  ASSERT_TRUE(backend.AllocateKvPool(8).ok());
  EXPECT_EQ(backend.num_kv_blocks(), 8);
  EXPECT_EQ(backend.device_bytes_in_use() - before, 8 * static_cast<int64_t>(layout.BlockBytes()));
  EXPECT_EQ(backend.AllocateKvPool(8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend.allocations_after_init(), 0);
}

TEST_P(CpuBackendTest, ScratchGrowsOnlyForLargerBatches) {
  BackendOptions options;
  options.block_tokens = kBlockTokens;
  options.max_tokens_per_step = 4;
  absl::StatusOr<std::unique_ptr<CpuBackend>> created = CpuBackend::Create(checkpoint(), options);
  ASSERT_TRUE(created.ok()) << created.status();
  CpuBackend& backend = **created;
  ASSERT_TRUE(backend.AllocateKvPool(kNumBlocks).ok());
  const int64_t before = backend.device_bytes_in_use();
  RunBatch(backend, {{{1, 2, 3}, 0, {0}}});
  EXPECT_EQ(backend.scratch_growths(), 0);
  RunBatch(backend, {{RandomTokens(9, vocab(), rng_), 0, {1, 2, 3}}});
  EXPECT_EQ(backend.scratch_growths(), 1);
  EXPECT_GT(backend.device_bytes_in_use(), before);
  RunBatch(backend, {{{4, 5}, 0, {4}}});
  EXPECT_EQ(backend.scratch_growths(), 1);
  EXPECT_EQ(backend.allocations_after_init(), 0);
}

const ArchCase& CaseNamed(const std::string& name) {
  static const std::vector<ArchCase> cases = Cases();
  for (const ArchCase& c : cases) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return cases[0];
}

// With every layer windowed (Phi-3 case: window 7, 2 layers) the last token reads nothing
// before position n - 1 - 2 * 6: an earlier token changes no bit of its logits, a later one
// does. A full-attention layer (Gemma 2's second) reads everything.
TEST(CpuBackendWindowTest, WindowsBoundWhatTheLastTokenReads) {
  std::mt19937 rng(5);
  for (const std::string name : {"phi3", "gemma2"}) {
    const Checkpoint& checkpoint = GetCheckpoint(CaseNamed(name));
    ASSERT_TRUE(checkpoint.config().LayerWindow(0).has_value()) << name;
    std::unique_ptr<CpuBackend> backend = MakeBackend(checkpoint);
    BlockIds ids(rng);
    const std::vector<int32_t> prompt = RandomTokens(30, checkpoint.config().vocab_size, rng);
    const std::vector<float> base = RunBatch(*backend, {{prompt, 0, ids.Take(30)}});
    std::vector<int32_t> early = prompt;
    early[30 - 1 - 2 * 6 - 1] = (early[30 - 1 - 2 * 6 - 1] + 1) % 300;
    const std::vector<float> early_changed = RunBatch(*backend, {{early, 0, ids.Take(30)}});
    std::vector<int32_t> late = prompt;
    late[30 - 1 - 2 * 6] = (late[30 - 1 - 2 * 6] + 1) % 300;
    const std::vector<float> late_changed = RunBatch(*backend, {{late, 0, ids.Take(30)}});
    if (name == "phi3") {
      EXPECT_EQ(early_changed, base);
    } else {
      EXPECT_NE(early_changed, base);
    }
    EXPECT_NE(late_changed, base) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, CpuBackendTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<ArchCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace kvtier
