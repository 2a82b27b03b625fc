// Log-probabilities of one logits row: the host reference (log-softmax in double) that the
// sampler chain reports and the device kernels are tested against. They are always of the
// raw row, the model's own distribution (sampler_chain.h says why). Stateless; thread-safe.
#ifndef KVTIER_BACKEND_LOGPROBS_H_
#define KVTIER_BACKEND_LOGPROBS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace kvtier {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// log(sum_i exp(logits[i])), as max + log(sum exp(logit - max)) in double. -inf logits
// (masked tokens) add nothing.
double LogSumExp(std::span<const float> logits);

// logits[token] - lse, rounded to float.
inline float LogprobOf(std::span<const float> logits, int32_t token, double lse) {
  return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - lse);
}

// Appends the top_n most likely tokens (largest logit first, ties by lower id; fewer when
// the vocabulary is smaller) with their log-probabilities. `scratch` avoids allocation.
void AppendTopLogprobs(std::span<const float> logits, double lse, int32_t top_n,
                       std::vector<TokenLogprob>* out, std::vector<int32_t>* scratch);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_LOGPROBS_H_
