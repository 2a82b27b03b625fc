// Implementation of Scheduler (scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier {
namespace {

bool RunsBefore(const Sequence* a, const Sequence* b) {
  if (a->params.priority != b->params.priority) return a->params.priority > b->params.priority;
  return a->arrival < b->arrival;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, KvCacheManager* kv, PreemptionPolicy* policy)
    : options_(options), kv_(kv), policy_(policy) {}

int64_t Scheduler::PeakBlocks(int64_t num_tokens) const {
  const GroupedBlockTables* grouped = kv_->grouped();
  if (grouped == nullptr) return kv_->BlocksForTokens(num_tokens);
  return grouped->groups().SequencePeakBlocks(num_tokens, options_.max_tokens_per_step);
}

absl::Status Scheduler::CheckFits(int64_t max_tokens) const {
  const int64_t blocks_needed = PeakBlocks(max_tokens);
  const int64_t block_bytes = static_cast<int64_t>(kv_->block_bytes());
  const int64_t device = DeviceCapacity();
  if (blocks_needed <= device) return absl::OkStatus();
  const int64_t host = kv_->host().num_blocks();
  if (options_.max_long_running > 0 && device > 0 && blocks_needed <= device + host &&
      blocks_needed <= options_.max_long_blocks) {
    return absl::OkStatus();
  }
  const std::string need = absl::StrCat("sequence of up to ", max_tokens, " tokens needs ", blocks_needed,
                                        " KV blocks (", blocks_needed * block_bytes, " bytes) but the device tier has ",
                                        kv_->num_device_blocks(), " blocks (", kv_->num_device_blocks() * block_bytes,
                                        " bytes), ", kv_->num_pinned_blocks(), " of them pinned");
  if (options_.max_long_running > 0 && blocks_needed > options_.max_long_blocks) {
    return absl::ResourceExhaustedError(absl::StrCat(need, "; the backend streams at most ", options_.max_long_blocks,
                                                     " host-resident blocks per step (cuda host_kv_stream_tokens)"));
  }
  if (options_.max_long_running == 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat(need, "; it must fit on the device tier to run (", options_.why_no_long, ")"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(need, " and the host tier ", host, " blocks (", host * block_bytes,
                                                   " bytes); it must fit on the device and host tiers together "
                                                   "to run (the disk tier cannot be read in place)"));
}

bool Scheduler::IsLong(const Sequence& seq) const {
  return options_.max_long_running > 0 &&
         PeakBlocks(seq.num_prompt_tokens + seq.params.max_new_tokens) > DeviceCapacity();
}

int64_t Scheduler::NumLongRunning() const {
  return std::count_if(running_.begin(), running_.end(), [this](const Sequence* seq) { return IsLong(*seq); });
}

int64_t Scheduler::ChunkLength(const Sequence& seq, int64_t budget) const {
  int64_t length = std::min(seq.num_uncomputed(), budget);
  // A load plan's chunk stops where its loaded blocks attach.
  if (seq.attach_at > seq.num_computed) length = std::min(length, seq.attach_at - seq.num_computed);
  if (!IsLong(seq)) return length;
  const int64_t block_tokens = kv_->block_tokens();
  // With layer groups a logical block takes one block in every group.
  const GroupedBlockTables* grouped = kv_->grouped();
  const int64_t blocks_per_logical = grouped != nullptr ? grouped->groups().num_groups() : 1;
  const int64_t max_blocks = std::max<int64_t>(1, DeviceCapacity() / 2 / blocks_per_logical);
  // The chunk's positions [start, start + length) touch at most max_blocks logical blocks.
  const int64_t start = seq.num_computed;
  return std::min(length, (start / block_tokens + max_blocks) * block_tokens - start);
}

int64_t Scheduler::FirstChunkLength(const Sequence& seq, int64_t budget, int64_t length) const {
  const int64_t full = options_.max_tokens_per_step;
  // A load plan cuts the chunks where its loaded blocks attach: nothing to align to.
  if (budget != full || seq.attach_at > seq.num_computed) return length;
  const int64_t remainder = seq.num_uncomputed() % full;
  return seq.num_uncomputed() > full && remainder > 0 ? std::min(length, remainder) : length;
}

absl::StatusOr<bool> Scheduler::StreamForRoom(Sequence* seq, int64_t wanted) {
  ASSIGN_OR_RETURN(bool streamed, MakeRoomByStreaming(seq, wanted));
  for (auto it = running_.rbegin(); !streamed && it != running_.rend(); ++it) {
    if (*it == seq) continue;
    ASSIGN_OR_RETURN(streamed, MakeRoomByStreaming(*it, wanted));
  }
  return streamed;
}

absl::StatusOr<bool> Scheduler::MakeRoomByStreaming(Sequence* seq, int64_t wanted) {
  if (!IsLong(*seq)) return false;
  ASSIGN_OR_RETURN(const int64_t moved, kv_->MoveOldBlocksToHost(seq->id, seq->num_computed, wanted));
  return moved > 0;
}

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

void Scheduler::Fork(Sequence* parent, Sequence* child) {
  if (static_cast<int64_t>(running_.size()) < options_.max_running &&
      kv_->Fork(parent->id, child->id, parent->num_computed).ok()) {
    child->num_computed = parent->num_computed;
    child->state = SequenceState::kRunning;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), child, RunsBefore), child);
    return;
  }
  ++num_forks_queued_;
  Enqueue(child);
}

void Scheduler::DropForRecompute(Sequence* seq) {
  kv_->Release(seq->id);
  seq->num_computed = 0;
  seq->attach_at = -1;
  seq->load_end = -1;
  ++num_recomputes_;
}

void Scheduler::ReleaseDeviceBlocks(Sequence* seq) {
  // With layer groups a swap moves only the blocks each group keeps (KeptBlocks: counted
  // from the computed positions, not listed).
  const GroupedBlockTables* grouped = kv_->grouped();
  const int64_t blocks = grouped != nullptr ? grouped->groups().ComputedBlocksHeld(grouped->NumComputed(seq->id))
                                            : static_cast<int64_t>(kv_->BlockTable(seq->id).size());
  const bool swap = policy_ != nullptr && policy_->ShouldSwap(*seq, blocks);
  if (!swap || !kv_->SwapOut(seq->id).ok()) DropForRecompute(seq);
}

void Scheduler::Preempt(Sequence* victim) {
  std::erase(running_, victim);
  ReleaseDeviceBlocks(victim);
  victim->state = SequenceState::kPaused;
  InsertWaiting(victim);
  ++num_preemptions_;
}

int64_t Scheduler::BlocksToStart(const Sequence& seq) const {
  if (kv_->IsSwappedOut(seq.id)) {
    // + the next chunk's new block, in every group with layer groups.
    const GroupedBlockTables* grouped = kv_->grouped();
    return kv_->SwappedBlocks(seq.id) + (grouped != nullptr ? grouped->groups().num_groups() : 1);
  }
  return kv_->NewBlocksNeeded(seq.id, seq.num_computed + ChunkLength(seq, options_.max_tokens_per_step));
}

bool Scheduler::PrepareWaiting(Sequence* seq, int64_t budget, int64_t keep_free, int64_t* length) {
  if (IsLong(*seq) && NumLongRunning() >= options_.max_long_running) return false;
  const int64_t available = kv_->num_available_device_blocks() - keep_free;
  if (kv_->IsSwappedOut(seq->id)) {
    if (kv_->SwappedBlocks(seq->id) > available) return false;
    // A corrupt or unreadable swapped copy is dropped: the sequence recomputes instead.
    if (!kv_->SwapIn(seq->id).ok()) {
      seq->num_computed = 0;
      seq->attach_at = -1;
      seq->load_end = -1;
      ++num_recomputes_;
    }
  }
  const bool fresh = seq->num_computed == 0 && kv_->BlockTable(seq->id).empty();
  // Resumed right where its load plan attaches the loaded blocks.
  if (!fresh && seq->attach_at >= 0 && seq->num_computed >= seq->attach_at) Attach(seq);
  if (fresh && !running_.empty() && !seq->scoring_prompt()) {
    // Others keep the step busy: rather than read its disk-cached prefix on the stepping
    // thread, start reading it ahead and admit it once the reads have landed.
    if (kv_->ReadAhead(seq->id, seq->tokens, seq->keys())) return false;
  }
  // A prompt being scored computes every position: its log-probabilities need them all.
  if (fresh && !seq->scoring_prompt()) seq->num_computed = MatchOrPlan(seq);
  *length = ChunkLength(*seq, budget);
  if (fresh) *length = FirstChunkLength(*seq, budget, *length);
  const int64_t end = seq->num_computed + *length;
  if (kv_->NewBlocksNeeded(seq->id, end) > kv_->num_available_device_blocks() - keep_free) {
    // A long sequence resuming makes its own room. A failed copy leaves its blocks where
    // they were: it waits like one short of blocks, and Next() returns the error.
    absl::StatusOr<bool> moved = MakeRoomByStreaming(seq, kv_->NewBlocksNeeded(seq->id, end) + keep_free);
    if (!moved.ok() && deferred_error_.ok()) deferred_error_ = moved.status();
  }
  if (kv_->NewBlocksNeeded(seq->id, end) > kv_->num_available_device_blocks() - keep_free ||
      !kv_->Reserve(seq->id, end).ok()) {
    if (fresh) {  // give matched prefix blocks back to the cache while it waits
      kv_->UnmatchPrefix(seq->id);
      seq->num_computed = 0;
      seq->attach_at = -1;
      seq->load_end = -1;
    }
    return false;
  }
  return true;
}

bool Scheduler::ReclaimPrefetched(const Sequence* keep) {
  for (auto it = waiting_.rbegin(); it != waiting_.rend(); ++it) {
    if (*it == keep || kv_->BlockTable((*it)->id).empty()) continue;
    ReleaseDeviceBlocks(*it);
    ++num_prefetches_reclaimed_;
    return true;
  }
  return false;
}

void Scheduler::Admit(Sequence* seq, int64_t length, Schedule* schedule) {
  const int64_t end = seq->num_computed + length;
  std::erase(waiting_, seq);
  seq->state = SequenceState::kRunning;
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, RunsBefore), seq);
  schedule->chunks.push_back({seq, seq->num_computed, length, end == seq->num_tokens(), {}});
}

void Scheduler::EnsureProgress(int64_t budget, Schedule* schedule) {
  Sequence* head = waiting_.front();
  while (ReclaimPrefetched(head)) {}
  int64_t length = 0;
  if (PrepareWaiting(head, budget, /*keep_free=*/0, &length)) {
    Admit(head, length, schedule);
    return;
  }
  // A long sequence moves its older blocks to host slots, which a context just created may
  // not have pinned yet: nothing else can run, so wait for the host tier rather than fail it.
  if (IsLong(*head) && kv_->host().preparing()) {
    kv_->host().WaitUntilPrepared();
    if (PrepareWaiting(head, budget, /*keep_free=*/0, &length)) {
      Admit(head, length, schedule);
      return;
    }
  }
  // Every device block is free or evictable now but for the pinned ones (and the head's
  // own): the head needs more than the pins leave, and nothing but the caller unpinning
  // would change that. The engine finishes it (its blocks are released then).
  head->error = absl::StrCat("sequence ", head->id, " cannot run: its next chunk needs more device KV blocks than the ",
                             kv_->num_device_blocks() - kv_->num_pinned_blocks(), " of ", kv_->num_device_blocks(),
                             " that pinned prefixes leave (unpin prefixes to make room)");
  std::erase(waiting_, head);
  schedule->unrunnable.push_back(head);
}

absl::StatusOr<Schedule> Scheduler::Next() {
  // 0. Host and disk slots prepared in the background since the last step join their
  // tiers; blocks prefetched during the previous step are read from this step on.
  kv_->AdmitPreparedSlots();
  RETURN_IF_ERROR(kv_->WaitForPrefetches());
  Schedule schedule;
  int64_t budget = options_.max_tokens_per_step;
  const bool had_work = !running_.empty() || !waiting_.empty();

  // 1. Running sequences, in order: decodes (1 token) and unfinished chunked prefills.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    NotePlanProgress(seq);
    if (seq->attach_at > seq->num_computed) Replan(seq);
    if (seq->attach_at >= 0 && seq->num_computed >= seq->attach_at) Attach(seq);
    const int64_t length = ChunkLength(*seq, budget);
    const int64_t end = seq->num_computed + length;
    bool self_preempted = false;
    // The blocks, or the lowest in line gives its own up: a long sequence first moves its
    // own old blocks to the host tier; then paused sequences holding prefetched blocks (a
    // waiting sequence never keeps blocks from a running one), then running ones from the
    // back (possibly this sequence).
    while (!kv_->Reserve(seq->id, end).ok()) {
      ASSIGN_OR_RETURN(const bool streamed, StreamForRoom(seq, kv_->NewBlocksNeeded(seq->id, end)));
      if (streamed) continue;
      if (ReclaimPrefetched(nullptr)) continue;
      Sequence* victim = running_.back();  // lowest priority, most recently admitted
      Preempt(victim);
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // everything after it was preempted first
    schedule.chunks.push_back({seq, seq->num_computed, length, end == seq->num_tokens(), {}});
    budget -= length;
    ++i;
  }

  // 2. Waiting (new or paused) sequences, while the budget, batch and free blocks allow.
  //    A waiting sequence never preempts a running one.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence* seq = waiting_.front();
    int64_t length = 0;
    if (!PrepareWaiting(seq, budget, options_.watermark_blocks, &length)) break;
    Admit(seq, length, &schedule);
    budget -= length;
  }

  // 3. Progress: nothing runs, yet sequences wait (see the top).
  if (running_.empty() && !waiting_.empty() && budget > 0) EnsureProgress(budget, &schedule);
  if (had_work && budget > 0 && schedule.chunks.empty() && schedule.unrunnable.empty()) ++num_stalled_schedules_;
  // 4. Into what is still free, the paused sequences next in line (copies that overlap this
  //    step's forward), and the write-back of cached blocks to the host tier.
  PrefetchWaiting();
  kv_->StartBackgroundCopies();
  if (!deferred_error_.ok()) return std::exchange(deferred_error_, absl::OkStatus());
  // The tables are final now: nothing changes them before Commit.
  for (ScheduledChunk& chunk : schedule.chunks) {
    chunk.blocks = kv_->BlockTable(chunk.sequence->id);
    chunk.host_kv = kv_->HostResident(chunk.sequence->id);
  }
  return schedule;
}

void Scheduler::Commit(const Schedule& schedule) {
  for (const ScheduledChunk& chunk : schedule.chunks) {
    Sequence* seq = chunk.sequence;
    seq->num_computed += chunk.length;
    kv_->OnComputed(seq->id, seq->tokens, seq->num_computed, seq->params.priority, seq->keys());
    if (seq->params.pin_prefix && !seq->prefix_pinned && seq->num_computed >= seq->num_prompt_tokens) {
      kv_->PinPrefix(seq->id, seq->num_prompt_tokens / kv_->block_tokens(), seq->tokens, seq->keys());
      seq->prefix_pinned = true;
    }
  }
}

void Scheduler::EndStep() {
  if (policy_ != nullptr) policy_->ObserveCopyBandwidth(MeasuredSwapBandwidth(kv_->counters()));
  PrefetchWaiting();
  kv_->FinishStep(/*idle=*/running_.empty() && waiting_.empty());
}


void Scheduler::PrefetchWaiting() {
  // In queue order, while room lasts: the sequences ahead of a paused one are counted with
  // the blocks they will take to start, so a prefetch never takes what an earlier sequence
  // in line needs (it would then wait behind blocks held for those after it).
  int64_t available = kv_->num_available_device_blocks() - options_.watermark_blocks;
  // Running sequences first: the blocks their next chunk will take.
  for (const Sequence* seq : running_) {
    available -= kv_->NewBlocksNeeded(seq->id, seq->num_computed + ChunkLength(*seq, options_.max_tokens_per_step) + 1);
  }
  for (Sequence* seq : waiting_) {
    const int64_t blocks = BlocksToStart(*seq);
    if (blocks > available) break;
    available -= blocks;
    if (!kv_->IsSwappedOut(seq->id)) continue;
    if (!kv_->SwapIn(seq->id, /*prefetch=*/true).ok()) {
      DropForRecompute(seq);
      available += blocks;
    }
  }
  // The next sequences in line: what they will need from disk is read into host slots on
  // the KV manager's I/O thread meanwhile (a no-op without host and disk tiers).
  constexpr int kReadAheadSequences = 2;
  int read_ahead = 0;
  for (Sequence* seq : waiting_) {
    if (read_ahead++ == kReadAheadSequences) break;
    kv_->ReadAhead(seq->id, seq->tokens, seq->keys());
  }
}

absl::Status Scheduler::VerifyIntegrity() const {
  if (num_stalled_schedules_ > 0) {
    return absl::InternalError(absl::StrCat("the scheduler made no progress in ", num_stalled_schedules_,
                                            " step(s) while sequences were queued (", running_.size(),
                                            " running, ", waiting_.size(), " waiting now)"));
  }
  auto ordered = [](const std::vector<Sequence*>& queue) {
    return std::is_sorted(queue.begin(), queue.end(), RunsBefore);
  };
  if (!ordered(running_) || !ordered(waiting_)) return absl::InternalError("a scheduler queue is out of order");
  for (const Sequence* seq : running_) {
    if (std::find(waiting_.begin(), waiting_.end(), seq) != waiting_.end()) {
      return absl::InternalError(absl::StrCat("sequence ", seq->id, " is both running and waiting"));
    }
    if (seq->state != SequenceState::kRunning || kv_->IsSwappedOut(seq->id)) {
      return absl::InternalError(absl::StrCat("running sequence ", seq->id, " is not running on the device"));
    }
  }
  for (const Sequence* seq : waiting_) {
    if (seq->finished()) return absl::InternalError(absl::StrCat("finished sequence ", seq->id, " is queued"));
  }
  return kv_->VerifyIntegrity();
}

}  // namespace kvtier
