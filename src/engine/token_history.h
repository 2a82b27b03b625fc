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
  // token once, in first-seen order, bias-only tokens first).
  void AppendAdjustments(std::vector<TokenAdjustment>* out) const;

 private:
  struct Entry {
    int32_t token;
    bool in_context = false;  // in the prompt or generated
    int32_t generated = 0;    // times generated
    float bias = 0.0f;
  };
  Entry& At(int32_t token);

  const SamplingParams& params_;
  const bool track_context_;  // a penalty is on
  const bool active_;
  std::vector<Entry> entries_;
  absl::flat_hash_map<int32_t, int32_t> index_;  // token -> entries_ index
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_TOKEN_HISTORY_H_
