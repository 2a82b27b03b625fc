// Implementation of Scheduler (scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>

namespace kvtier {
namespace {

bool RunsBefore(const Sequence* a, const Sequence* b) {
  if (a->params.priority != b->params.priority) return a->params.priority > b->params.priority;
  return a->arrival < b->arrival;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, KvCacheManager* kv, const PreemptionPolicy* policy)
    : options_(options), kv_(kv), policy_(policy) {}

void Scheduler::InsertWaiting(Sequence* sequence) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), sequence, RunsBefore), sequence);
}

void Scheduler::Enqueue(Sequence* sequence) {
  sequence->state = SequenceState::kWaiting;
  InsertWaiting(sequence);
}

void Scheduler::Remove(Sequence* sequence) {
  std::erase(running_, sequence);
  std::erase(waiting_, sequence);
  kv_->Release(sequence->id);
}

void Scheduler::DropForRecompute(Sequence* seq) {
  kv_->Release(seq->id);
  seq->num_computed = 0;
  ++num_recomputes_;
}

void Scheduler::Preempt(Sequence* victim, Schedule* schedule) {
  std::erase(running_, victim);
  const int64_t blocks = static_cast<int64_t>(kv_->BlockTable(victim->id).size());
  const bool swap = policy_ != nullptr && policy_->ShouldSwap(*victim, blocks);
  if (!swap || !kv_->SwapOut(victim->id).ok()) DropForRecompute(victim);
  victim->state = SequenceState::kPaused;
  InsertWaiting(victim);
  schedule->preempted.push_back(victim);
  ++num_preemptions_;
}

bool Scheduler::PrepareWaiting(Sequence* seq, int64_t budget, int64_t* length) {
  const int64_t available = kv_->num_available_device_blocks() - options_.watermark_blocks;
  if (kv_->IsSwappedOut(seq->id)) {
    if (kv_->SwappedBlocks(seq->id) > available) return false;
    // A corrupt or unreadable swapped copy is dropped: the sequence recomputes instead.
    if (!kv_->SwapIn(seq->id).ok()) {
      seq->num_computed = 0;
      ++num_recomputes_;
    }
  }
  const bool fresh = seq->num_computed == 0 && kv_->BlockTable(seq->id).empty();
  if (fresh && !running_.empty()) {
    // Others keep the step busy: rather than read its disk-cached prefix on the stepping
    // thread, start reading it ahead and admit it once the reads have landed.
    if (kv_->ReadAhead(seq->id, seq->tokens)) return false;
  }
  if (fresh) seq->num_computed = kv_->MatchPrefix(seq->id, seq->tokens, seq->params.priority);
  *length = std::min(seq->num_uncomputed(), budget);
  const int64_t end = seq->num_computed + *length;
  if (kv_->NewBlocksNeeded(seq->id, end) > kv_->num_available_device_blocks() - options_.watermark_blocks) {
    if (fresh) {  // give matched prefix blocks back to the cache while it waits
      kv_->Release(seq->id);
      seq->num_computed = 0;
    }
    return false;
  }
  kv_->Reserve(seq->id, end).IgnoreError();  // cannot fail: checked above
  return true;
}

Schedule Scheduler::Next() {
  Schedule schedule;
  int64_t budget = options_.max_tokens_per_step;

  // 1. Running sequences, in order: decodes (1 token) and unfinished chunked prefills.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t length = std::min(seq->num_uncomputed(), budget);
    const int64_t end = seq->num_computed + length;
    bool self_preempted = false;
    while (kv_->NewBlocksNeeded(seq->id, end) > kv_->num_available_device_blocks()) {
      Sequence* victim = running_.back();  // lowest priority, most recently admitted
      Preempt(victim, &schedule);
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // everything after it was preempted first
    kv_->Reserve(seq->id, end).IgnoreError();  // cannot fail: checked above
    schedule.chunks.push_back({seq, seq->num_computed, length, end == seq->num_tokens()});
    budget -= length;
    ++i;
  }

  // 2. Waiting (new or paused) sequences, while the budget, batch and free blocks allow.
  //    A waiting sequence never preempts a running one.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence* seq = waiting_.front();
    int64_t length = 0;
    if (!PrepareWaiting(seq, budget, &length)) break;
    const int64_t end = seq->num_computed + length;
    waiting_.erase(waiting_.begin());
    seq->state = SequenceState::kRunning;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, RunsBefore), seq);
    schedule.chunks.push_back({seq, seq->num_computed, length, end == seq->num_tokens()});
    budget -= length;
  }
  PrefetchWaiting();
  return schedule;
}

void Scheduler::PrefetchWaiting() {
  int64_t available = kv_->num_available_device_blocks() - options_.watermark_blocks;
  for (Sequence* seq : waiting_) {
    if (!kv_->IsSwappedOut(seq->id)) continue;
    const int64_t blocks = kv_->SwappedBlocks(seq->id);
    // Room for its blocks plus the next chunk's new block, or stop: order is kept.
    if (blocks + 1 > available) break;
    if (!kv_->SwapIn(seq->id, /*prefetch=*/true).ok()) {
      DropForRecompute(seq);
      continue;
    }
    available -= blocks;
  }
  // The next sequences in line: what they will need from disk is read into host slots on
  // the KV manager's I/O thread meanwhile (a no-op without host and disk tiers).
  constexpr int kReadAheadSequences = 2;
  int read_ahead = 0;
  for (Sequence* seq : waiting_) {
    if (read_ahead++ == kReadAheadSequences) break;
    kv_->ReadAhead(seq->id, seq->tokens);
  }
}

}  // namespace kvtier
