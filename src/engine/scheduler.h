// Scheduler: decides, each step, which sequences run and how many of their tokens, under a
// token budget and the KV cache manager's answer to "can these positions be held". Running
// decodes go first, then chunked prefill of running and waiting sequences. When device
// blocks run short the lowest-priority, most recently admitted running sequence is paused.
// It never touches memory itself. Not thread-safe: driven under the engine lock.
#ifndef KVTIER_ENGINE_SCHEDULER_H_
#define KVTIER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

struct SchedulerOptions {
  int64_t max_tokens_per_step = 512;
  int64_t max_running = 256;
  // Device blocks kept free when admitting or resuming waiting sequences, so running
  // decodes do not have to preempt on the next step.
  int64_t watermark_blocks = 0;
};

// Decides, per preempted sequence, whether its KV is swapped out or dropped and later
// recomputed. Implemented by the engine's cost model.
class PreemptionPolicy {
 public:
  virtual ~PreemptionPolicy() = default;
  virtual bool ShouldSwap(const Sequence& victim, int64_t blocks) const = 0;
};

// One sequence's share of a step: feed tokens [start, start + length).
struct ScheduledChunk {
  Sequence* sequence = nullptr;
  int64_t start = 0;
  int64_t length = 0;
  bool need_logits = false;  // the chunk reaches the sequence's last token: sample after it
};

struct Schedule {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;  // paused this step (KV swapped out or dropped)
};

class Scheduler {
 public:
  // `policy` may be null (always recompute); both must outlive the scheduler.
  Scheduler(const SchedulerOptions& options, KvCacheManager* kv, const PreemptionPolicy* policy);

  // Queues a new sequence (state kWaiting).
  void Enqueue(Sequence* sequence);
  // Takes a sequence out of every queue (finished or cancelled) and frees its blocks.
  void Remove(Sequence* sequence);
  Schedule Next();
  // Starts swapping in the paused sequences next in line while device blocks are free
  // (called at the end of a step, when finished sequences have returned theirs, and after
  // scheduling), so their blocks are back before the step that runs them; and has the KV
  // manager read ahead from disk what the next two waiting sequences will need.
  void PrefetchWaiting();

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t num_recomputes() const { return num_recomputes_; }

 private:
  // Pauses `victim`: swaps its KV out (policy permitting, room permitting) or drops it for
  // recompute, and queues it again.
  void Preempt(Sequence* victim, Schedule* schedule);
  // Makes a waiting sequence's first `end` positions holdable on the device: swaps it in
  // or matches its prefix, then reserves. False (and nothing held) when it cannot run now.
  bool PrepareWaiting(Sequence* seq, int64_t budget, int64_t* length);

  void DropForRecompute(Sequence* seq);
  void InsertWaiting(Sequence* sequence);

  SchedulerOptions options_;
  KvCacheManager* kv_;
  const PreemptionPolicy* policy_;
  // Both ordered by (priority desc, arrival asc): the back is the first to be preempted.
  std::vector<Sequence*> running_;
  std::vector<Sequence*> waiting_;
  int64_t num_preemptions_ = 0;
  int64_t num_recomputes_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_SCHEDULER_H_
