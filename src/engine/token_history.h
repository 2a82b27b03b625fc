// TokenHistory: what the sampler chain's sparse part needs to know about one sequence —
// which tokens its context holds (repetition penalty), how often each was generated
// (frequency and presence penalties), and its logit bias — kept up to date token by token,
// so a step lists a row's adjustments without walking the whole context.
// Not thread-safe: owned by its Sequence, under the engine lock.
#ifndef KVTIER_ENGINE_TOKEN_HISTORY_H_
#define KVTIER_ENGINE_TOKEN_HISTORY_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backend/sampler_chain.h"
#include "engine/sampling_params.h"

namespace kvtier {

class TokenHistory {
 public:
  // `params` must outlive the history (it is the sequence's own).
  TokenHistory(const SamplingParams& params, std::span<const int32_t> prompt);

  // Whether any adjustment can apply: a penalty is on or a bias given.
  bool active() const { return active_; }
  // Records a generated token.
  void AddGenerated(int32_t token);
  // Appends one TokenAdjustment per token that the penalties or the bias change (each
  // token once, in first-seen order, bias tokens first). A copy of a list kept current
  // token by token: a step costs one copy, not a walk over the context.
  void AppendAdjustments(std::vector<TokenAdjustment>* out) const {
    out->insert(out->end(), adjustments_.begin(), adjustments_.end());
  }

 private:
  // The token's adjustment, added (a no-op one) when new.
  TokenAdjustment& At(int32_t token);

  const SamplingParams& params_;
  // Which tokens can be changed: the context's (repetition penalty on), the generated ones
  // (frequency or presence penalty on), the biased ones.
  const bool track_context_;
  const bool track_generated_;
  const bool active_;
  std::vector<TokenAdjustment> adjustments_;
  std::vector<int32_t> generated_;               // per adjustments_ entry: times generated
  absl::flat_hash_map<int32_t, int32_t> index_;  // token -> adjustments_ index
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_TOKEN_HISTORY_H_
