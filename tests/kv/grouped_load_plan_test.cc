// Load or recompute with layer groups (KvCacheManager::ProbeSlowPrefix and the scheduler's
// plan over GroupedFixture's full-attention and window groups): a prompt whose group
// entries only the disk holds, after a restart, is split by the policy's costs — its front
// computed in the first chunk, which stops where the loaded back attaches; the attach
// continues the sequence's own tables, each group's blocks the next query reads loaded with
// the bytes they had, and the window group's blocks the window has passed given back.
#include <memory>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "kv/disk_tier.h"
#include "kv/grouped_fixture.h"
#include "kv/plan_steps.h"
#include "testing/fixed_cost_policy.h"

namespace kvtier {
namespace {

constexpr int64_t kPlanBlockTokens = testing::kGroupedBlockTokens;
constexpr int kPlanPattern = 1;

// 10 full blocks + 1 token.
std::unique_ptr<Sequence> PlanPrompt(SequenceId id) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 41; ++i) tokens.push_back(300 + i * 7);
  return std::make_unique<Sequence>(id, id, tokens, SamplingParams{});
}

Schedule PlanStep(Scheduler& scheduler) {
  absl::StatusOr<Schedule> schedule = scheduler.Next();
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : Schedule{};
}

// Computes the prompt (each group's blocks stamped), releases it, evicts its 20 group
// entries to the host tier and restarts: then only the disk holds them.
void ComputeEvictAndRestart(testing::GroupedFixture& f) {
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/false}, f.kv.get(), nullptr);
  auto seq = PlanPrompt(1);
  scheduler.Enqueue(seq.get());
  Schedule s = PlanStep(scheduler);
  ASSERT_EQ(s.chunks.size(), 1u);
  f.Stamp(1, kPlanPattern);
  scheduler.Commit(s);
  scheduler.Remove(seq.get());
  ASSERT_TRUE(f.kv->Reserve(9, 24 * kPlanBlockTokens / 2).ok());  // every device block
  f.kv->Release(9);
  f.kv->transfers().AwaitLane(Lane::kCopy);
  f.Reopen();
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 20);
  ASSERT_EQ(f.kv->Stats().layer_groups.cached_blocks, 0);
}

TEST(GroupedLoadPlanTest, FrontComputedWhileEachGroupsBackLoads) {
  testing::GroupedFixture f(/*device_blocks=*/24, /*host_blocks=*/32, /*disk_blocks=*/64, /*prefix_cache=*/true);
  ASSERT_NO_FATAL_FAILURE(ComputeEvictAndRestart(f));
  // Computing a block costs what loading one is assumed to cost before any is measured:
  // the 10 slow blocks load 11 group blocks (every full-attention one, the window's last).
  const double load_seconds = static_cast<double>(f.kv->block_bytes()) / DiskTier::kGuessedBytesPerSecond;
  testing::FixedCostPolicy policy(load_seconds / kPlanBlockTokens);
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/true}, f.kv.get(), &policy);
  auto seq = PlanPrompt(2);
  scheduler.Enqueue(seq.get());
  // The loads land before the front is done.
  const std::vector<std::pair<int64_t, int64_t>> chunks =
      testing::StepChunks(*f.kv, scheduler, *seq, /*steps=*/2, /*drain_after=*/0);
  const Scheduler::LoadPlanCounters& plans = scheduler.load_plan_counters();
  EXPECT_EQ(plans.plans, 1);
  EXPECT_EQ(plans.last.slow_blocks, 10);
  EXPECT_EQ(plans.last.fast_blocks, 0);
  EXPECT_GT(plans.computed_blocks, 0);
  EXPECT_GT(plans.loaded_blocks, 0);
  EXPECT_EQ(plans.computed_blocks + plans.loaded_blocks, 10);
  const int64_t attach = plans.computed_blocks;
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], std::make_pair(int64_t{0}, attach * kPlanBlockTokens));  // the front
  EXPECT_EQ(chunks[1], std::make_pair(int64_t{40}, int64_t{1}));                 // after the loaded back
  // The loaded blocks hold what was stored: the full-attention group's [attach, 10), the
  // window's block 9 (the last query of the prompt reads positions 37..40).
  EXPECT_TRUE(f.Holds(2, kPlanPattern, 0, attach, 10));
  EXPECT_TRUE(f.Holds(2, kPlanPattern, 1, 9, 10));
  EXPECT_EQ(f.tables().Table(2, 1).first_block, 9);
  EXPECT_EQ(f.kv->counters().prefix_hits[static_cast<int>(Tier::kHost)] +
                f.kv->counters().prefix_hits[static_cast<int>(Tier::kDisk)],
            10 - attach);
  EXPECT_TRUE(scheduler.VerifyIntegrity().ok()) << scheduler.VerifyIntegrity();
  scheduler.Remove(seq.get());
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

}  // namespace
}  // namespace kvtier
