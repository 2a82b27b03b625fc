// PlanLoadOrRecompute (load_plan.h).
#include "engine/load_plan.h"

#include <algorithm>
#include <cmath>

namespace kvtier {

LoadPlan PlanLoadOrRecompute(int64_t slow_blocks, const LoadCosts& costs) {
  const int64_t n = std::max<int64_t>(slow_blocks, 0);
  const double load = std::max(costs.load_seconds_per_block, 0.0);
  const double compute = std::max(costs.compute_seconds_per_block, 0.0);
  auto seconds = [&](int64_t k) {
    const double front = static_cast<double>(k) * compute, back = static_cast<double>(n - k) * load;
    return costs.overlap ? std::max(front, back) : front + back;
  };
  // Overlapped, the time is lowest where the two sides meet, k* = n * load / (load +
  // compute): one of its two neighbours is the best split. Otherwise an end is.
  int64_t best = 0;
  auto consider = [&](int64_t k) {
    k = std::clamp<int64_t>(k, 0, n);
    if (seconds(k) < seconds(best)) best = k;
  };
  consider(n);
  if (costs.overlap && load + compute > 0) {
    const double meet = static_cast<double>(n) * load / (load + compute);
    consider(static_cast<int64_t>(std::floor(meet)));
    consider(static_cast<int64_t>(std::ceil(meet)));
  }
  return {best, n - best, seconds(best)};
}

}  // namespace kvtier
