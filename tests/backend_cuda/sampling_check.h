// Checks a device-sampled token against SampleRow (backend/row_sampling.h), the host
// reference, allowing for rounding: the device sums float probabilities in another order,
// so the token may be any kept candidate whose cumulative-mass interval holds the draw's
// target within `tol` of the mass, and a top-p cut whose share is within `tol` of top_p
// may come out one candidate longer or shorter.
#ifndef KVTIER_TESTS_BACKEND_CUDA_SAMPLING_CHECK_H_
#define KVTIER_TESTS_BACKEND_CUDA_SAMPLING_CHECK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "backend/row_sampling.h"
#include "gtest/gtest.h"

namespace kvtier::cuda_test {

inline ::testing::AssertionResult SampledLikeReference(std::span<const float> logits,
                                                       const RowSampling& s, int32_t token,
                                                       double tol = 1e-5) {
  std::vector<std::pair<float, int32_t>> scratch;
  const int32_t want = SampleRow(logits, s, &scratch);
  if (token == want) return ::testing::AssertionSuccess();
  if (s.greedy()) {
    return ::testing::AssertionFailure() << "greedy: got " << token << ", want " << want;
  }
  // SampleRow's order, probabilities, cut and target, recomputed.
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  size_t keep = s.top_k > 0 && s.top_k < vocab ? static_cast<size_t>(s.top_k) : order.size();
  std::vector<double> cum(keep + 1, 0.0);  // cum[i] = mass of the first i candidates
  const double max_logit = logits[order[0]];
  for (size_t i = 0; i < keep; ++i) {
    cum[i + 1] = cum[i] + std::exp((logits[order[i]] - max_logit) / static_cast<double>(s.temperature));
  }
  size_t cut = keep;
  if (s.top_p < 1.0f) {
    for (size_t i = 0; i < keep; ++i) {
      if (cum[i + 1] / cum[keep] >= s.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  size_t top_p_cut = cut;
  if (s.min_p > 0.0f) {  // of those, the ones whose probability is >= min_p (the first's is 1)
    size_t c = 1;
    while (c < cut && cum[c + 1] - cum[c] >= s.min_p) ++c;
    cut = c;
  }
  const double target = s.u * cum[cut];
  const size_t pos = static_cast<size_t>(std::find(order.begin(), order.end(), token) - order.begin());
  const size_t ref = static_cast<size_t>(std::find(order.begin(), order.end(), want) - order.begin());
  const double slack = tol * cum[keep];
  // Any kept candidate whose share of the cumulative mass [cum[pos], cum[pos + 1]) holds the
  // target up to rounding: the neighbour at an exact boundary, or, where the tail is dense
  // (u near 1, 128k candidates of tiny mass), one several ranks away.
  if (pos < cut && cum[pos] - slack <= target && target <= cum[pos + 1] + slack) {
    return ::testing::AssertionSuccess();
  }
  // Or a min-p cut one candidate longer, when that candidate's probability is within
  // rounding of min_p.
  if (s.min_p > 0.0f && pos == cut && cut < top_p_cut && std::abs(cum[cut + 1] - cum[cut] - s.min_p) <= tol) {
    return ::testing::AssertionSuccess();
  }
  // Or a cut one candidate longer or shorter, when the cut's share is within rounding.
  if (s.top_p < 1.0f && pos <= cut && std::abs(cum[cut - 1] / cum[keep] - s.top_p) <= tol) {
    return ::testing::AssertionSuccess();
  }
  if (s.top_p < 1.0f && pos <= cut && cut < keep && std::abs(cum[cut] / cum[keep] - s.top_p) <= tol) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "got token " << token << " (rank " << pos << "), reference " << want << " (rank "
         << ref << "); T " << s.temperature << " top_k " << s.top_k << " top_p " << s.top_p
         << " min_p " << s.min_p << " u " << s.u << ", kept " << cut << " of " << keep;
}

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_SAMPLING_CHECK_H_
