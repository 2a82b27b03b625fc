// Implementation of SampleToken and SamplingParams::Validate.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be a finite number >= 0, got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  return absl::OkStatus();
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng,
                    std::vector<std::pair<float, int32_t>>* scratch) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (params.greedy()) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return best;
  }
  // Candidates sorted by logit, descending (ties by lower id first, for determinism).
  auto& cand = *scratch;
  cand.resize(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) cand[static_cast<size_t>(i)] = {logits[i], i};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand.size();
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < keep) {
    keep = static_cast<size_t>(params.top_k);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(), by_logit);
  } else {
    std::sort(cand.begin(), cand.end(), by_logit);
  }
  // Softmax over the kept candidates, in double for a stable cumulative sum.
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  const double max_logit = cand[0].first;
  std::vector<double> probs(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((cand[i].first - max_logit) * inv_t);
    total += probs[i];
  }
  if (params.top_p < 1.0f) {
    double mass = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= params.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  double u = rng.NextUnit() * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= probs[i];
    if (u < 0) return cand[i].second;
  }
  return cand[keep - 1].second;
}

}  // namespace kvtier
