// FixedCostPolicy: a preemption policy with a fixed compute time per token and no swaps, the
// cost model the load-plan tests set so that which blocks a plan loads and which it computes
// follows from the read speeds they give the tiers alone.
#ifndef KVTIER_TESTS_TESTING_FIXED_COST_POLICY_H_
#define KVTIER_TESTS_TESTING_FIXED_COST_POLICY_H_

#include <cstdint>

#include "engine/scheduler.h"

namespace kvtier::testing {

class FixedCostPolicy final : public PreemptionPolicy {
 public:
  explicit FixedCostPolicy(double seconds_per_token) : seconds_per_token_(seconds_per_token) {}
  bool ShouldSwap(const Sequence&, int64_t) const override { return false; }
  double SecondsPerToken() const override { return seconds_per_token_; }

 private:
  double seconds_per_token_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FIXED_COST_POLICY_H_
