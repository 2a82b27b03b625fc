// Log-softmax reference (logprobs.h).
#include "backend/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvtier {

double LogSumExp(std::span<const float> logits) {
  double max = -std::numeric_limits<double>::infinity();
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  if (!std::isfinite(max)) return max;
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  return max + std::log(sum);
}

void AppendTopLogprobs(std::span<const float> logits, double lse, int32_t top_n,
                       std::vector<TokenLogprob>* out, std::vector<int32_t>* scratch) {
  const size_t n = std::min(static_cast<size_t>(std::max(top_n, 0)), logits.size());
  if (n == 0) return;
  scratch->resize(logits.size());
  std::iota(scratch->begin(), scratch->end(), 0);
  std::partial_sort(scratch->begin(), scratch->begin() + static_cast<std::ptrdiff_t>(n), scratch->end(),
                    [&](int32_t a, int32_t b) {
                      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  for (size_t i = 0; i < n; ++i) {
    const int32_t token = (*scratch)[i];
    out->push_back({token, LogprobOf(logits, token, lse)});
  }
}

}  // namespace kvtier
