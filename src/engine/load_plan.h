// Load or recompute, per prefix: a prompt's blocks found only in a slow tier (disk, remote)
// can be loaded or computed again. When loads overlap compute (reads on the I/O threads,
// remote lookups), the front `compute_blocks` of them are computed while the back ones
// load, the split chosen where the two finish together; when they cannot overlap, the
// cheaper of loading all and computing all. Pure; thread-safe.
#ifndef KVTIER_ENGINE_LOAD_PLAN_H_
#define KVTIER_ENGINE_LOAD_PLAN_H_

#include <cstdint>

namespace kvtier {

// Measured costs (the engine's cost model): per block loaded from the slow tier, and per
// block computed (a prefill chunk's time per token times block_tokens).
struct LoadCosts {
  double load_seconds_per_block = 0;
  double compute_seconds_per_block = 0;
  bool overlap = true;  // loads run while the front computes
};

struct LoadPlan {
  int64_t compute_blocks = 0;  // the front slow blocks computed
  int64_t load_blocks = 0;     // the back slow blocks loaded
  double seconds = 0;          // the plan's expected time
};

// The plan for `slow_blocks` blocks: the split minimising the expected time, which is
// therefore never above loading them all (compute_blocks 0) nor computing them all
// (load_blocks 0). Ties go to loading (less compute for the batch).
LoadPlan PlanLoadOrRecompute(int64_t slow_blocks, const LoadCosts& costs);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_LOAD_PLAN_H_
