// Scheduler: load or recompute (scheduler.h, engine/load_plan.h). A fresh prompt whose
// prefix continues, after the blocks the device and host tiers hold, with blocks only a
// slow tier holds (disk, remote) gets a plan from the policy's measured compute time per
// token and the KV manager's measured load time per block: its front slow blocks are
// computed like any prompt while its back ones load on the I/O threads; when the front is
// computed the loaded blocks join it (Attach), and whatever did not load is computed.
// A long sequence gets no plan: it matches its prefix as any prompt without one does.
#include <algorithm>

#include "engine/load_plan.h"
#include "engine/scheduler.h"

namespace kvtier {

int64_t Scheduler::MatchOrPlan(Sequence* seq) {
  // No plan for a long sequence (docs/LONG_CONTEXT.md): its old blocks move to host slots
  // of its own while it computes, which a later attach by prefix match does not follow.
  const double seconds_per_token =
      options_.load_or_recompute && policy_ != nullptr && !IsLong(*seq) ? policy_->SecondsPerToken() : 0.0;
  if (seconds_per_token <= 0) return kv_->MatchPrefix(seq->id, seq->tokens, seq->params.priority, seq->keys());
  const KvCacheManager::SlowPrefix slow = kv_->ProbeSlowPrefix(seq->id, seq->tokens, seq->keys());
  const int64_t block_tokens = kv_->block_tokens();
  const LoadPlan plan = PlanLoadOrRecompute(
      slow.slow_blocks, {slow.load_seconds_per_block, seconds_per_token * static_cast<double>(block_tokens), slow.overlap});
  if (plan.compute_blocks == 0) return kv_->MatchPrefix(seq->id, seq->tokens, seq->params.priority, seq->keys());
  // Only the fast blocks now; the back of the slow run loads while the front computes.
  const int64_t matched =
      kv_->MatchPrefix(seq->id, seq->tokens, seq->params.priority, seq->keys(), /*max_blocks=*/slow.fast_blocks);
  ++load_plans_.plans;
  load_plans_.computed_blocks += plan.compute_blocks;
  load_plans_.loaded_blocks += plan.load_blocks;
  if (matched != slow.fast_blocks * block_tokens || plan.load_blocks == 0) return matched;
  const int64_t attach = slow.fast_blocks + plan.compute_blocks;
  kv_->LoadPrefixAhead(seq->tokens, seq->keys(), attach, attach + plan.load_blocks);
  seq->attach_at = attach * block_tokens;
  return matched;
}

void Scheduler::Attach(Sequence* seq) {
  if (seq->num_computed == seq->attach_at) {
    // What has landed joins; the blocks still loading are computed, never waited for, so a
    // plan whose loads run late costs at most recomputing them.
    const int64_t covered = kv_->MatchPrefix(seq->id, seq->tokens, seq->params.priority, seq->keys(),
                                             /*max_blocks=*/-1, /*landed_only=*/true);
    seq->num_computed = std::max(seq->num_computed, covered);
  }
  seq->attach_at = -1;
}

}  // namespace kvtier
