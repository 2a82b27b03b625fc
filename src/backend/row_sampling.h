// How one logits row becomes a token: the sampling parameters plus the sequence's uniform
// draw for this token, so a backend can sample on its own device and return only ids.
// SampleRow is the reference (and the host implementation): every backend must pick the
// token it picks, up to floating-point rounding at the cut and draw boundaries.
#ifndef KVTIER_BACKEND_ROW_SAMPLING_H_
#define KVTIER_BACKEND_ROW_SAMPLING_H_

#include <cstdint>
#include <span>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace kvtier {

struct RowSampling {
  float temperature = 0.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off; 1 = greedy
  float top_p = 1.0f;        // 1 = off
  double u = 0.0;            // the draw, in [0, 1); unused when greedy
  float min_p = 0.0f;        // 0 = off; keeps probabilities >= min_p times the largest

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
};

// InvalidArgument naming the row and field unless rows.size() == logit_rows and every row
// has its temperature, top_k, top_p and min_p in range (sampling_ranges.h) and u in [0, 1).
absl::Status ValidateRowSampling(std::span<const RowSampling> rows, size_t logit_rows);
// The same checks for one row, the message prefixed with `what` (e.g. "sample 3").
absl::Status ValidateOneRowSampling(const RowSampling& row, absl::string_view what);

// Greedy: the first index of the maximum. Otherwise, in transformers' warper order:
// candidates ordered by logit (descending, ties by lower id); temperature: probabilities
// exp((logit - max) / temperature) in double; top-k: the first top_k kept; top-p: the
// shortest prefix whose share of the kept mass reaches top_p; min-p: of those, the ones
// whose probability is >= min_p times the first's (the first's is 1). The token is the
// first whose cumulative mass exceeds u * (kept mass). `scratch` avoids per-call allocation.
// Logits already adjusted by the chain's sparse part (sampler_chain.h) come in here.
int32_t SampleRow(std::span<const float> logits, const RowSampling& sampling,
                  std::vector<std::pair<float, int32_t>>* scratch);

// The distribution SampleRow draws from, per token (0 for tokens cut; one-hot when greedy),
// computed by the same code: for tests against other implementations of the warpers.
std::vector<double> SamplingDistribution(std::span<const float> logits, const RowSampling& sampling);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_ROW_SAMPLING_H_
