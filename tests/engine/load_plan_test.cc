// PlanLoadOrRecompute over fake cost models: the split where loading and computing finish
// together, never slower than loading all or computing all, and the ends when loads
// cannot overlap compute (checked against every split by brute force); and the prefill
// speed the policy gives the plans.
#include "engine/load_plan.h"
#include "engine/preemption_policy.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

double Seconds(int64_t n, int64_t k, const LoadCosts& c) {
  const double front = k * c.compute_seconds_per_block, back = (n - k) * c.load_seconds_per_block;
  return c.overlap ? std::max(front, back) : front + back;
}

TEST(LoadPlanTest, SplitsWhereBothSidesFinishTogether) {
  // Disk after a restart, as measured once: loading a block costs 1.7x computing it.
  const LoadPlan plan = PlanLoadOrRecompute(256, {1.7e-3, 1.0e-3, true});
  EXPECT_EQ(plan.compute_blocks + plan.load_blocks, 256);
  EXPECT_NEAR(plan.compute_blocks, 256 * 1.7 / 2.7, 1.0);
  EXPECT_LE(plan.seconds, 256 * 1.0e-3 * 0.64);  // both ends are >= 0.256 s
  // Loading much faster than computing: load nearly everything.
  const LoadPlan fast = PlanLoadOrRecompute(256, {1e-5, 1e-3, true});
  EXPECT_LE(fast.compute_blocks, 3);
  // Loading far slower: compute nearly everything.
  const LoadPlan slow = PlanLoadOrRecompute(256, {1.0, 1e-3, true});
  EXPECT_GE(slow.compute_blocks, 255);
}

TEST(LoadPlanTest, WithoutOverlapTakesTheCheaperEnd) {
  EXPECT_EQ(PlanLoadOrRecompute(100, {2e-3, 1e-3, false}).compute_blocks, 100);
  EXPECT_EQ(PlanLoadOrRecompute(100, {0.5e-3, 1e-3, false}).compute_blocks, 0);
  EXPECT_EQ(PlanLoadOrRecompute(100, {1e-3, 1e-3, false}).compute_blocks, 0);  // a tie loads
}

TEST(LoadPlanTest, NeverSlowerThanEitherAloneAndOptimal) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> cost(1e-6, 1e-2);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = static_cast<int64_t>(rng() % 300);
    const LoadCosts costs{cost(rng), cost(rng), trial % 3 != 0};
    const LoadPlan plan = PlanLoadOrRecompute(n, costs);
    ASSERT_EQ(plan.compute_blocks + plan.load_blocks, n);
    ASSERT_DOUBLE_EQ(plan.seconds, Seconds(n, plan.compute_blocks, costs));
    ASSERT_LE(plan.seconds, Seconds(n, 0, costs) + 1e-12);  // loading all
    ASSERT_LE(plan.seconds, Seconds(n, n, costs) + 1e-12);  // computing all
    double best = Seconds(n, 0, costs);
    for (int64_t k = 0; k <= n; ++k) best = std::min(best, Seconds(n, k, costs));
    ASSERT_NEAR(plan.seconds, best, 1e-12) << "n " << n << " trial " << trial;
  }
}

TEST(LoadPlanTest, DegenerateInputs) {
  EXPECT_EQ(PlanLoadOrRecompute(0, {1, 1, true}).compute_blocks, 0);
  EXPECT_EQ(PlanLoadOrRecompute(-3, {1, 1, true}).load_blocks, 0);
  EXPECT_EQ(PlanLoadOrRecompute(10, {0, 0, true}).compute_blocks, 0);  // nothing measured: load
}

// The prefill time per token a plan is made with: the lowest of the recent steps of at
// least 128 prompt tokens (a context's first, cold step does not set it once a warm one
// came; small steps do not count), while the latest step's own stays at hand for re-plans.
TEST(CostModelPolicyTest, PrefillSpeedIsTheLowestRecentLargeStep) {
  CostModelPolicy policy(PreemptionMode::kRecompute, /*block_bytes=*/1 << 20, /*can_swap=*/false);
  policy.ObserveCompute(512, 512 * 160e-6);  // cold: one-time costs
  EXPECT_DOUBLE_EQ(policy.SecondsPerToken(), 160e-6);
  policy.ObserveCompute(512, 512 * 50e-6);
  EXPECT_DOUBLE_EQ(policy.SecondsPerToken(), 50e-6);
  policy.ObserveCompute(1, 1e-3);  // a decode step: not a prefill's speed
  EXPECT_DOUBLE_EQ(policy.SecondsPerToken(), 50e-6);
  policy.ObserveCompute(2048, 2048 * 60e-6);
  EXPECT_DOUBLE_EQ(policy.SecondsPerToken(), 50e-6);
  EXPECT_DOUBLE_EQ(policy.LatestSecondsPerToken(), 60e-6);
  // Sixteen steps later the 50 us step has left the window.
  for (int i = 0; i < 16; ++i) policy.ObserveCompute(1024, 1024 * 70e-6);
  EXPECT_DOUBLE_EQ(policy.SecondsPerToken(), 70e-6);
}

}  // namespace
}  // namespace kvtier
