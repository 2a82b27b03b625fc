// Tests of CpuBackend on tiny random checkpoints of every supported architecture: the
// forward against an independent double-precision dense implementation, chunked-prefill
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

// Dense, causal, double-precision forward written from the HF modeling code, reading the
// checkpoint's tensors directly (not CpuWeights); returns the last token's logits.
class ReferenceModel {
 public:
  explicit ReferenceModel(const Checkpoint& checkpoint)
      : checkpoint_(checkpoint), c_(checkpoint.config()) {}

  std::vector<double> LastLogits(const std::vector<int32_t>& tokens) {
    const int64_t n = tokens.size(), hd = c_.head_dim, hidden = c_.hidden_size;
    std::vector<double> embed = W("model.embed_tokens.weight");
    Matrix x(n, std::vector<double>(hidden));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < hidden; ++i) x[t][i] = embed[tokens[t] * hidden + i];
    }
    const std::vector<double> inv_freq = InvFreq();
    for (int64_t layer = 0; layer < c_.num_layers; ++layer) {
      const std::string p = absl::StrCat("model.layers.", layer, ".");
      Matrix h = Norm(x, W(p + "input_layernorm.weight"));
      const bool bias = c_.attention_bias;
      Matrix q = Linear(h, p + "self_attn.q_proj", bias);
      Matrix k = Linear(h, p + "self_attn.k_proj", bias);
      Matrix v = Linear(h, p + "self_attn.v_proj", bias);
      if (c_.qk_norm) {
        q = HeadNorm(q, W(p + "self_attn.q_norm.weight"));
        k = HeadNorm(k, W(p + "self_attn.k_norm.weight"));
      }
      Rope(q, inv_freq);
      Rope(k, inv_freq);
      Matrix attn(n, std::vector<double>(c_.q_dim()));
      const int64_t group = c_.num_heads / c_.num_kv_heads;
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t head = 0; head < c_.num_heads; ++head) {
          const int64_t kvh = head / group;
          std::vector<double> w(t + 1);
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j <= t; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d) dot += q[t][head * hd + d] * k[j][kvh * hd + d];
            w[j] = dot / std::sqrt(double(hd));
            mx = std::max(mx, w[j]);
          }
          for (double& e : w) sum += (e = std::exp(e - mx));
          for (int64_t j = 0; j <= t; ++j) {
            for (int64_t d = 0; d < hd; ++d) {
              attn[t][head * hd + d] += w[j] / sum * v[j][kvh * hd + d];
            }
          }
        }
      }
      Add(x, Linear(attn, p + "self_attn.o_proj",
                    bias && c_.architecture != Architecture::kQwen2));
      h = Norm(x, W(p + "post_attention_layernorm.weight"));
      Matrix gate = Linear(h, p + "mlp.gate_proj", false);
      const Matrix up = Linear(h, p + "mlp.up_proj", false);
      for (int64_t t = 0; t < n; ++t) {
        for (size_t i = 0; i < gate[t].size(); ++i) {
          gate[t][i] = gate[t][i] / (1 + std::exp(-gate[t][i])) * up[t][i];
        }
      }
      Add(x, Linear(gate, p + "mlp.down_proj", false));
    }
    const Matrix last = Norm({x.back()}, W("model.norm.weight"));
    const std::string head =
        c_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    return MatVec(W(head), last[0], c_.vocab_size);
  }

 private:
  using Matrix = std::vector<std::vector<double>>;

  std::vector<double> W(const std::string& name) {
    absl::StatusOr<TensorView> tensor = checkpoint_.Tensor(name);
    EXPECT_TRUE(tensor.ok()) << tensor.status();
    std::vector<double> out(tensor->num_elements());
    for (int64_t i = 0; i < tensor->num_elements(); ++i) out[i] = tensor->ElementAsFloat(i);
    return out;
  }
  static std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x,
                                    int64_t rows) {
    std::vector<double> y(rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (size_t i = 0; i < x.size(); ++i) y[r] += w[r * x.size() + i] * x[i];
    }
    return y;
  }
  Matrix Linear(const Matrix& x, const std::string& prefix, bool bias) {
    const std::vector<double> w = W(prefix + ".weight");
    const std::vector<double> b = bias ? W(prefix + ".bias") : std::vector<double>();
    const int64_t out_dim = w.size() / x[0].size();
    Matrix y;
    for (const std::vector<double>& row : x) {
      y.push_back(MatVec(w, row, out_dim));
      for (size_t i = 0; i < b.size(); ++i) y.back()[i] += b[i];
    }
    return y;
  }
  Matrix Norm(const Matrix& x, const std::vector<double>& w) const {
    Matrix y = x;
    for (std::vector<double>& row : y) {
      double ms = 0;
      for (double e : row) ms += e * e;
      const double s = 1 / std::sqrt(ms / row.size() + c_.rms_norm_eps);
      for (size_t i = 0; i < row.size(); ++i) row[i] *= s * w[i];
    }
    return y;
  }
  Matrix HeadNorm(const Matrix& x, const std::vector<double>& w) const {
    Matrix y;
    for (const std::vector<double>& row : x) {
      y.emplace_back();
      for (size_t h0 = 0; h0 < row.size(); h0 += c_.head_dim) {
        const Matrix head = Norm(
            {std::vector<double>(row.begin() + h0, row.begin() + h0 + c_.head_dim)}, w);
        y.back().insert(y.back().end(), head[0].begin(), head[0].end());
      }
    }
    return y;
  }
  std::vector<double> InvFreq() const {
    std::vector<double> inv;
    for (int64_t i = 0; i < c_.head_dim; i += 2) {
      double f = 1.0 / std::pow(c_.rope_theta, double(i) / c_.head_dim);
      if (c_.rope_scaling) {
        const Llama3RopeScaling& s = *c_.rope_scaling;
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > s.original_max_position_embeddings / s.low_freq_factor) {
          f /= s.factor;
        } else if (wavelen >= s.original_max_position_embeddings / s.high_freq_factor) {
          const double smooth = (s.original_max_position_embeddings / wavelen -
                                 s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          f = (1 - smooth) * f / s.factor + smooth * f;
        }
      }
      inv.push_back(f);
    }
    return inv;
  }
  void Rope(Matrix& x, const std::vector<double>& inv) const {
    const int64_t half = c_.head_dim / 2;
    for (size_t t = 0; t < x.size(); ++t) {
      for (size_t h0 = 0; h0 < x[t].size(); h0 += c_.head_dim) {
        for (int64_t i = 0; i < half; ++i) {
          const double a = inv[i] * t, x1 = x[t][h0 + i], x2 = x[t][h0 + i + half];
          x[t][h0 + i] = x1 * std::cos(a) - x2 * std::sin(a);
          x[t][h0 + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
    }
  }
  static void Add(Matrix& x, const Matrix& y) {
    for (size_t t = 0; t < x.size(); ++t) {
      for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += y[t][i];
    }
  }

  const Checkpoint& checkpoint_;
  const ModelConfig& c_;
};

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

INSTANTIATE_TEST_SUITE_P(Architectures, CpuBackendTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<ArchCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace kvtier
