// kvtier's side of the GGUF comparisons: a checkpoint (GGUF file or directory) on the CPU
// backend (fast kernels unless asked for the reference), giving greedy continuations and next-token log-probabilities, and the measures
// the tests compare distributions by. Test-only; not thread-safe.
#ifndef KVTIER_TESTS_GGUF_KVTIER_RUNNER_H_
#define KVTIER_TESTS_GGUF_KVTIER_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/cpu/cpu_backend.h"
#include "model/checkpoint.h"

namespace kvtier::testing {

class KvtierRunner {
 public:
  static absl::StatusOr<std::unique_ptr<KvtierRunner>> Open(const std::string& model,
                                                            CpuKernels kernels = CpuKernels::kFast);

  const Checkpoint& checkpoint() const { return *checkpoint_; }
  // The next-token log-probabilities after each token of `tokens` (one row each).
  absl::StatusOr<std::vector<std::vector<float>>> Score(const std::vector<int32_t>& tokens);
  // `n` greedy tokens after `prompt`, and the log-probabilities each was picked from.
  absl::Status Generate(const std::vector<int32_t>& prompt, int n, std::vector<int32_t>* tokens,
                        std::vector<std::vector<float>>* logprobs);

 private:
  KvtierRunner() = default;
  absl::Status Forward(const std::vector<int32_t>& tokens, int64_t start, bool all, std::vector<float>* logits);

  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<CpuBackend> backend_;
  std::vector<int32_t> table_;  // block i at position block i * block_tokens
};

// log-softmax of one logits row, in double.
std::vector<float> LogSoftmax(const float* logits, int64_t n);
int32_t ArgMax(const std::vector<float>& row);
// KL(p || q) in nats of two distributions given as probabilities (p) and log-probabilities (log_q).
double KlDivergence(const std::vector<float>& p, const std::vector<float>& log_q);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_GGUF_KVTIER_RUNNER_H_
