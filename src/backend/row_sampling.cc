// SampleRow: the host reference of token sampling (row_sampling.h).
#include "backend/row_sampling.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backend/sampling_ranges.h"

namespace kvtier {

absl::Status ValidateRowSampling(std::span<const RowSampling> rows, size_t logit_rows) {
  if (rows.size() != logit_rows) {
    return absl::InvalidArgumentError(absl::StrCat(rows.size(), " sampling rows for ",
                                                   logit_rows, " logits rows"));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowSampling& s = rows[r];
    for (const absl::Status& range :
         {ValidateTemperature(s.temperature), ValidateTopK(s.top_k), ValidateTopP(s.top_p)}) {
      if (!range.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("sampling row ", r, ": ", range.message()));
      }
    }
    if (!(s.u >= 0.0 && s.u < 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat("sampling row ", r, ": u must be in [0, 1), got ", s.u));
    }
  }
  return absl::OkStatus();
}

int32_t SampleRow(std::span<const float> logits, const RowSampling& sampling,
                  std::vector<std::pair<float, int32_t>>* scratch) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (sampling.greedy()) {
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
  if (sampling.top_k > 0 && static_cast<size_t>(sampling.top_k) < keep) {
    keep = static_cast<size_t>(sampling.top_k);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(),
                      by_logit);
  } else {
    std::sort(cand.begin(), cand.end(), by_logit);
  }
  // Softmax over the kept candidates, in double for a stable cumulative sum.
  const double inv_t = 1.0 / static_cast<double>(sampling.temperature);
  const double max_logit = cand[0].first;
  std::vector<double> probs(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((cand[i].first - max_logit) * inv_t);
    total += probs[i];
  }
  if (sampling.top_p < 1.0f) {
    double mass = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= sampling.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  double u = sampling.u * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= probs[i];
    if (u < 0) return cand[i].second;
  }
  return cand[keep - 1].second;
}

}  // namespace kvtier
