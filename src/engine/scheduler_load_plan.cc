// Scheduler: load or recompute (scheduler.h, engine/load_plan.h). A fresh prompt whose
// prefix continues, after the blocks the device and host tiers hold, with blocks only a
// slow tier holds (disk, remote) gets a plan from the policy's measured compute time per
// token and the KV manager's measured load time per block: its front slow blocks are
// computed like any prompt while its back ones load on the I/O threads; when the front is
// computed the loaded blocks join it (Attach), and whatever did not load is computed.
// A long sequence gets no plan: it matches its prefix as any prompt without one does.
#include <algorithm>
#include <chrono>
#include <cmath>

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
  LastLoadPlan& last = load_plans_.last;
  last = LastLoadPlan{};
  last.seq = seq->id;
  last.fast_blocks = slow.fast_blocks;
  last.slow_blocks = slow.slow_blocks;
  last.compute_blocks = plan.compute_blocks;
  last.load_blocks = plan.load_blocks;
  last.load_seconds_per_block = slow.load_seconds_per_block;
  last.compute_seconds_per_block = seconds_per_token * static_cast<double>(block_tokens);
  last.expected_seconds = plan.seconds;
  last.made = std::chrono::steady_clock::now();
  if (matched != slow.fast_blocks * block_tokens || plan.load_blocks == 0) return matched;
  const int64_t attach = slow.fast_blocks + plan.compute_blocks;
  // Loads start for as many blocks again in front of the split (within the front): the
  // split rests on measured speeds that can be off (a first plan's load speed is a guess or
  // a few reads' worth; the compute speed comes from shorter prompts). A load speed
  // underestimated up to twice still pays, as the front meets the loads wherever they have
  // come to (Replan, Attach); one overestimated costs only the reads the front overtakes.
  const int64_t ahead = std::min(plan.compute_blocks, plan.load_blocks);
  last.disk_reads_started = kv_->LoadPrefixAhead(seq->tokens, seq->keys(), attach - ahead, attach + plan.load_blocks);
  seq->attach_at = attach * block_tokens;
  seq->load_end = (attach + plan.load_blocks) * block_tokens;
  return matched;
}

void Scheduler::Attach(Sequence* seq) {
  const int64_t block_tokens = kv_->block_tokens();
  if (seq->num_computed == seq->attach_at) {
    const auto start = std::chrono::steady_clock::now();
    // What has landed joins; the blocks still loading are computed, never waited for, so a
    // plan whose loads run late costs at most recomputing them.
    const int64_t covered = kv_->MatchPrefix(seq->id, seq->tokens, seq->params.priority, seq->keys(),
                                             /*max_blocks=*/-1, /*landed_only=*/true);
    LastLoadPlan& last = load_plans_.last;
    const bool tracked = last.seq == seq->id;
    if (tracked) {
      const auto end = std::chrono::steady_clock::now();
      if (std::isnan(last.attach_s)) {
        last.front_computed_after_s = std::chrono::duration<double>(start - last.made).count();
        last.attach_s = 0;
        last.attached_blocks = 0;
      }
      last.attach_s += std::chrono::duration<double>(end - start).count();
      last.attached_blocks += std::max<int64_t>(covered - seq->num_computed, 0) / block_tokens;
      ++last.attaches;
    }
    if (covered > seq->num_computed) {
      seq->num_computed = covered;
    } else if (const int64_t next = NextAttach(seq); next > seq->num_computed) {
      // The loads run late: they land from the back, so compute on toward them and attach
      // where the two should meet now (with the load speed measured meanwhile).
      seq->attach_at = next;
      return;
    }
  }
  seq->attach_at = -1;
  seq->load_end = -1;
}

void Scheduler::Replan(Sequence* seq) {
  const int64_t block_tokens = kv_->block_tokens();
  if (seq->load_end <= seq->num_computed || seq->num_computed % block_tokens != 0 || policy_ == nullptr) return;
  const int64_t from = seq->num_computed / block_tokens;
  const KvCacheManager::LoadFrontier frontier =
      kv_->ProbeLoadFrontier(seq->tokens, seq->keys(), from, seq->load_end / block_tokens);
  if (frontier.landed_from <= from) {  // all landed: they join before the next step
    seq->attach_at = seq->num_computed;
    return;
  }
  if (const int64_t next = NextAttach(seq); next > seq->num_computed) seq->attach_at = next;
}

int64_t Scheduler::NextAttach(Sequence* seq) {
  const int64_t block_tokens = kv_->block_tokens();
  if (seq->load_end <= seq->num_computed || seq->num_computed % block_tokens != 0 || policy_ == nullptr) return -1;
  const int64_t from = seq->num_computed / block_tokens, to = seq->load_end / block_tokens;
  const KvCacheManager::LoadFrontier frontier = kv_->ProbeLoadFrontier(seq->tokens, seq->keys(), from, to);
  // Nothing loading before the landed run: the gap is computed, then the run joins (when
  // nothing has landed at all, there is nothing to join: the plan ends).
  if (!frontier.loading) return frontier.landed_from < to ? frontier.landed_from * block_tokens : -1;
  const int64_t gap = frontier.landed_from - from;
  if (gap <= 0) return -1;  // landed, yet not matched (no device room): computed as usual
  // Where computing from the front and loading from the back meet: the share of the gap
  // computed is load / (load + compute) per block; at least a chunk worth a step.
  const double load = frontier.load_seconds_per_block;
  const double compute = policy_->LatestSecondsPerToken() * static_cast<double>(block_tokens);
  const double share = load + compute > 0 ? load / (load + compute) : 1.0;
  int64_t blocks = static_cast<int64_t>(std::ceil(static_cast<double>(gap) * share));
  blocks = std::clamp<int64_t>(std::max(blocks, kMinAttachChunkBlocks), 1, gap);
  if (blocks == gap && frontier.landed_from == to) return -1;  // computes it all: no plan left
  return (from + blocks) * block_tokens;
}

void Scheduler::NotePlanProgress(Sequence* seq) {
  // Until the step after the prompt's last chunk (its first token), so the steps after the
  // attach are seen too.
  LastLoadPlan& last = load_plans_.last;
  if (last.seq != seq->id || last.progress.size() >= kMaxPlanProgress || seq->num_computed > seq->num_prompt_tokens ||
      (!last.progress.empty() && last.progress.back().computed_tokens == seq->num_prompt_tokens)) {
    return;
  }
  const int64_t block_tokens = kv_->block_tokens();
  const int64_t from = seq->num_computed / block_tokens;
  const KvCacheManager::LoadFrontier frontier =
      seq->load_end >= 0 ? kv_->ProbeLoadFrontier(seq->tokens, seq->keys(), from, seq->load_end / block_tokens)
                         : KvCacheManager::LoadFrontier{};
  last.progress.push_back({std::chrono::duration<double>(std::chrono::steady_clock::now() - last.made).count(),
                           seq->num_computed, frontier.landed_from, frontier.landed,
                           seq->attach_at < 0 ? -1 : seq->attach_at / block_tokens});
}

}  // namespace kvtier
