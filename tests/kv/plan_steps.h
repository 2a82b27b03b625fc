// StepChunks: runs a scheduler's steps for one sequence the way a load-plan test watches
// them — each step's chunk committed (a token appended once the prompt is done), the disk
// reads drained after a chosen step — and returns each step's chunk (start, length). For
// load_plan_attach_test.cc and grouped_load_plan_test.cc. Not thread-safe.
#ifndef KVTIER_TESTS_KV_PLAN_STEPS_H_
#define KVTIER_TESTS_KV_PLAN_STEPS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "kv/kv_cache_manager.h"

namespace kvtier::testing {

// `steps` steps of `seq`, the disk reads drained after step `drain_after` (-1: never).
inline std::vector<std::pair<int64_t, int64_t>> StepChunks(KvCacheManager& kv, Scheduler& scheduler, Sequence& seq,
                                                           int steps, int drain_after) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int step = 0; step < steps; ++step) {
    absl::StatusOr<Schedule> s = scheduler.Next();
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s.ok() ? s->chunks.size() : 0u, 1u);
    if (!s.ok() || s->chunks.size() != 1) break;
    chunks.push_back({s->chunks[0].start, s->chunks[0].length});
    scheduler.Commit(*s);
    if (s->chunks[0].need_logits) seq.tokens.push_back(7);
    scheduler.EndStep();
    if (step == drain_after) kv.transfers().AwaitLane(Lane::kDiskRead);
  }
  return chunks;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_PLAN_STEPS_H_
