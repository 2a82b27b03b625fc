// kvtier on the CPU backend for the GGUF comparisons (kvtier_runner.h).
#include "kvtier_runner.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/status_macros.h"

namespace kvtier::testing {
namespace {

constexpr int64_t kBlockTokens = 16;

}  // namespace

absl::StatusOr<std::unique_ptr<KvtierRunner>> KvtierRunner::Open(const std::string& model, CpuKernels kernels) {
  std::unique_ptr<KvtierRunner> r(new KvtierRunner());
  ASSIGN_OR_RETURN(r->checkpoint_, Checkpoint::Open(model));
  BackendOptions options;
  options.num_threads = 2;
  options.cpu_kernels = kernels;
  options.block_tokens = kBlockTokens;
  ASSIGN_OR_RETURN(r->backend_, CpuBackend::Create(*r->checkpoint_, options));
  const int64_t blocks = (r->checkpoint_->config().max_position_embeddings + kBlockTokens - 1) / kBlockTokens;
  const int64_t pool = std::min<int64_t>(blocks, 4096 / kBlockTokens);
  RETURN_IF_ERROR(r->backend_->AllocateKvPool(pool));
  r->table_.resize(static_cast<size_t>(pool));
  std::iota(r->table_.begin(), r->table_.end(), 0);
  return r;
}

absl::Status KvtierRunner::Forward(const std::vector<int32_t>& tokens, int64_t start, bool all,
                                   std::vector<float>* logits) {
  const int64_t end = start + static_cast<int64_t>(tokens.size());
  if ((end + kBlockTokens - 1) / kBlockTokens > static_cast<int64_t>(table_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("sequence of ", end, " tokens is longer than the test's KV pool"));
  }
  ForwardBatch batch;
  SequenceChunk chunk;
  chunk.tokens = tokens;
  chunk.start_position = start;
  chunk.block_table = std::span<const int32_t>(table_.data(), static_cast<size_t>((end + kBlockTokens - 1) / kBlockTokens));
  chunk.need_logits = true;
  chunk.all_logits = all;
  batch.chunks.push_back(chunk);
  return backend_->Forward(batch, logits);
}

absl::StatusOr<std::vector<std::vector<float>>> KvtierRunner::Score(const std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  RETURN_IF_ERROR(Forward(tokens, 0, /*all=*/true, &logits));
  const int64_t vocab = backend_->vocab_size();
  std::vector<std::vector<float>> rows;
  for (size_t i = 0; i < tokens.size(); ++i) rows.push_back(LogSoftmax(logits.data() + i * vocab, vocab));
  return rows;
}

absl::Status KvtierRunner::Generate(const std::vector<int32_t>& prompt, int n, std::vector<int32_t>* tokens,
                                    std::vector<std::vector<float>>* logprobs) {
  const int64_t vocab = backend_->vocab_size();
  std::vector<float> logits;
  RETURN_IF_ERROR(Forward(prompt, 0, /*all=*/false, &logits));
  int64_t position = static_cast<int64_t>(prompt.size());
  for (int step = 0; step < n; ++step) {
    logprobs->push_back(LogSoftmax(logits.data(), vocab));
    const int32_t next = ArgMax(logprobs->back());
    tokens->push_back(next);
    if (step + 1 == n) break;
    RETURN_IF_ERROR(Forward({next}, position++, /*all=*/false, &logits));
  }
  return absl::OkStatus();
}

std::vector<float> LogSoftmax(const float* logits, int64_t n) {
  double max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, double{logits[i]});
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double{logits[i]} - max);
  const double log_sum = max + std::log(sum);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(double{logits[i]} - log_sum);
  return out;
}

int32_t ArgMax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

double KlDivergence(const std::vector<float>& p, const std::vector<float>& log_q) {
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > 0) kl += double{p[i]} * (std::log(double{p[i]}) - double{log_q[i]});
  }
  return kl;
}

}  // namespace kvtier::testing
