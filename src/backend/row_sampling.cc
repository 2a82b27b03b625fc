// SampleRow: the host reference of token sampling (row_sampling.h).
#include "backend/row_sampling.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backend/sampling_ranges.h"

namespace kvtier {

absl::Status ValidateOneRowSampling(const RowSampling& s, absl::string_view what) {
  for (const absl::Status& range : {ValidateTemperature(s.temperature), ValidateTopK(s.top_k),
                                    ValidateTopP(s.top_p), ValidateMinP(s.min_p)}) {
    if (!range.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", range.message()));
  }
  if (!(s.u >= 0.0 && s.u < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": u must be in [0, 1), got ", s.u));
  }
  return absl::OkStatus();
}

absl::Status ValidateRowSampling(std::span<const RowSampling> rows, size_t logit_rows) {
  if (rows.size() != logit_rows) {
    return absl::InvalidArgumentError(absl::StrCat(rows.size(), " sampling rows for ",
                                                   logit_rows, " logits rows"));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    if (absl::Status s = ValidateOneRowSampling(rows[r], absl::StrCat("sampling row ", r)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

int32_t FirstMaximum(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

// The candidates SampleRow draws from: (*scratch)[0, keep) in its order, with their
// unnormalised probabilities in probs[0, keep) and their sum in *total. Not for greedy rows.
size_t KeptCandidates(std::span<const float> logits, const RowSampling& sampling,
                      std::vector<std::pair<float, int32_t>>* scratch, std::vector<double>* probs,
                      double* total) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
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
  probs->resize(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    (*probs)[i] = std::exp((cand[i].first - max_logit) * inv_t);
    sum += (*probs)[i];
  }
  if (sampling.top_p < 1.0f) {
    double mass = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      mass += (*probs)[i] / sum;
      if (mass >= sampling.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += (*probs)[i];
  }
  if (sampling.min_p > 0.0f) {
    // probs[0] is exp(0) = 1, the largest: the threshold is min_p itself.
    const double threshold = static_cast<double>(sampling.min_p);
    size_t cut = 1;
    while (cut < keep && (*probs)[cut] >= threshold) ++cut;
    if (cut < keep) {
      keep = cut;
      sum = 0;
      for (size_t i = 0; i < keep; ++i) sum += (*probs)[i];
    }
  }
  *total = sum;
  return keep;
}

}  // namespace

int32_t SampleRow(std::span<const float> logits, const RowSampling& sampling,
                  std::vector<std::pair<float, int32_t>>* scratch) {
  if (sampling.greedy()) return FirstMaximum(logits);
  std::vector<double> probs;
  double total = 0;
  const size_t keep = KeptCandidates(logits, sampling, scratch, &probs, &total);
  const auto& cand = *scratch;
  double u = sampling.u * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= probs[i];
    if (u < 0) return cand[i].second;
  }
  return cand[keep - 1].second;
}

std::vector<double> SamplingDistribution(std::span<const float> logits, const RowSampling& sampling) {
  std::vector<double> out(logits.size(), 0.0);
  if (sampling.greedy()) {
    out[static_cast<size_t>(FirstMaximum(logits))] = 1.0;
    return out;
  }
  std::vector<std::pair<float, int32_t>> cand;
  std::vector<double> probs;
  double total = 0;
  const size_t keep = KeptCandidates(logits, sampling, &cand, &probs, &total);
  for (size_t i = 0; i < keep; ++i) out[static_cast<size_t>(cand[i].second)] = probs[i] / total;
  return out;
}

}  // namespace kvtier
