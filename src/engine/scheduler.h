// Scheduler: decides, each step, which sequences run and how many of their tokens, under a
// token budget and the KV cache manager's answer to "can these positions be held". Running
// decodes go first, then chunked prefill of running and waiting sequences. When device
// blocks run short the lowest-priority, most recently admitted running sequence is paused.
// It never touches memory itself. Not thread-safe: driven under the engine lock.
//
// Progress (liveness): whenever Next() is called with a sequence waiting or running and a
// token budget > 0, the schedule it returns holds at least one chunk, or names a sequence
// that can never run (Schedule::unrunnable: the device blocks its next chunk needs exceed
// what the caller's pinned prefixes leave). So every unfinished sequence advances or
// finishes within a bounded number of steps. What could hold the queue's head back while
// nothing runs — device blocks prefetched for paused sequences behind it, the watermark —
// is given up for it (Next(), step 3). Prefetched blocks never hold a running sequence back
// either: they are taken back before any running sequence is preempted. And prefetching
// keeps queue order: a paused sequence is swapped in ahead of time only where the running
// sequences' next chunks and the sequences before it in line leave room.
#ifndef KVTIER_ENGINE_SCHEDULER_H_
#define KVTIER_ENGINE_SCHEDULER_H_

#include <chrono>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/sequence.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

struct SchedulerOptions {
  int64_t max_tokens_per_step = 512;
  int64_t max_running = 256;
  // Device blocks kept free when admitting or resuming waiting sequences, so running
  // decodes do not have to preempt on the next step.
  int64_t watermark_blocks = 0;
  // A prompt prefix found only in a slow tier (disk, remote) is partly computed while the
  // rest loads, by the policy's measured costs (scheduler_load_plan.cc).
  bool load_or_recompute = false;
  // Long sequences (docs/LONG_CONTEXT.md): ones that could not fit the device tier, run
  // with their older blocks on the host tier. At most this many run at once (0: refused
  // at admission, as where the backend cannot read host-resident blocks; the engine sets
  // it from EngineOptions::max_long_running).
  int64_t max_long_running = 0;
  // Most blocks a long sequence's whole context may take (the backend's
  // MaxHostResidentBlocks: what one step can stream); longer ones are refused at admission.
  int64_t max_long_blocks = INT64_MAX;
  // Why long sequences are refused where max_long_running is 0 (the backend's
  // WhyNoHostResidentKv, or the option), in the refusal's message.
  std::string why_no_long = "long sequences are off";
};

// Decides, per preempted sequence, whether its KV is swapped out or dropped and later
// recomputed. Implemented by the engine's cost model.
class PreemptionPolicy {
 public:
  virtual ~PreemptionPolicy() = default;
  virtual bool ShouldSwap(const Sequence& victim, int64_t blocks) const = 0;
  // The swap bandwidth the KV manager measured so far (bytes/s; 0 before any swap).
  virtual void ObserveCopyBandwidth(double bytes_per_second) {}
  // Measured compute time per prompt token (0: unknown, no load plan is made).
  virtual double SecondsPerToken() const { return 0; }
  // The same, of the latest step of many prompt tokens alone: what a plan's next front
  // step will take (a prompt's own steps are larger than most before it, and faster per
  // token, which an average over earlier steps does not know yet).
  virtual double LatestSecondsPerToken() const { return SecondsPerToken(); }
};

// One sequence's share of a step: feed tokens [start, start + length).
struct ScheduledChunk {
  Sequence* sequence = nullptr;
  int64_t start = 0;
  int64_t length = 0;
  bool need_logits = false;  // the chunk reaches the sequence's last token: sample after it
  // The sequence's device block table, covering the chunk; valid until the step's Commit.
  std::span<const BlockId> blocks;
  // A long sequence's blocks read from the host tier in place (before `blocks`); likewise.
  HostResidentKv host_kv{};
};

struct Schedule {
  std::vector<ScheduledChunk> chunks;
  // Taken out of the queues: they can never run with the blocks pinned now (see the top).
  // The engine finishes them with an error.
  std::vector<Sequence*> unrunnable;
};

class Scheduler {
 public:
  // `policy` may be null (always recompute); both must outlive the scheduler.
  Scheduler(const SchedulerOptions& options, KvCacheManager* kv, PreemptionPolicy* policy);

  // ResourceExhausted (with the numbers) when a sequence of up to max_tokens tokens could
  // never be held, whatever else runs: by the device tier alone, or — long sequences
  // allowed — by the device and host tiers together (the disk tier cannot be read in
  // place); the admission check.
  absl::Status CheckFits(int64_t max_tokens) const;
  // Queues a new sequence (state kWaiting).
  void Enqueue(Sequence* sequence);
  // Takes a sequence out of every queue (finished or cancelled) and frees its blocks.
  void Remove(Sequence* sequence);
  // Parallel sampling: starts `child`, another completion of `parent`'s request that holds
  // no blocks, on the parent's computed prompt (call between Commit and EndStep). The KV
  // manager shares the parent's full blocks and copies its partial one, and the child
  // runs from the next step with num_computed = the parent's. When max_running sequences
  // already run or no device block is free for the copy, the child waits in line instead
  // and computes its context itself. Either way the caller appends its first token next.
  void Fork(Sequence* parent, Sequence* child);

  // A step, in three calls: Next() decides what runs (holding its blocks), the caller runs
  // the forward over the chunks, Commit() records it, the caller commits sampled tokens
  // (finishing sequences with Remove), EndStep() prepares the next step.
  // Next() first waits for the blocks prefetched at the end of the previous step; a failed
  // prefetch copy is returned (the backend's error) and nothing is scheduled.
  absl::StatusOr<Schedule> Next();
  // The chunks' positions hold K/V now: their full blocks become prefix-cache entries, and
  // a prompt asking for it is pinned once computed.
  void Commit(const Schedule& schedule);
  // After the step's finished sequences are removed: prefetches the paused sequences next
  // in line into the blocks they returned, and persists the disk tier's index.
  void EndStep();
  // Releases every pinned prefix (they stay cached, evictable again).
  void UnpinPrefixes() { kv_->UnpinAll(); }
  // The KV manager's calls the engine makes between steps, through the scheduler: a new
  // sequence's key chain, the idle writer's pump (KvCacheManager::PumpIdleWrites) and the
  // statistics.
  BlockKeyChain KeyChain(std::string_view cache_namespace) const { return kv_->KeyChain(cache_namespace); }
  int64_t PumpIdleWrites() { return kv_->PumpIdleWrites(); }
  KvStats kv_stats() const { return kv_->Stats(); }
  // The layer groups' block tables the step's forward reads (null without groups), and a
  // group's host-resident blocks in front of its table.
  const GroupedBlockTables* grouped_tables() const { return kv_->grouped(); }
  HostResidentKv GroupHostResident(SequenceId seq, int64_t group) const { return kv_->HostResident(seq, group); }

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t num_recomputes() const { return num_recomputes_; }
  // Forks that could not share the parent's blocks (the child computes its context).
  int64_t num_forks_queued() const { return num_forks_queued_; }
  // Paused sequences whose prefetched blocks were taken back (for a running sequence, or
  // for the queue's head).
  int64_t num_prefetches_reclaimed() const { return num_prefetches_reclaimed_; }
  // Load plans made (scheduler_load_plan.cc): prompts whose slow-tier prefix was split, and
  // the blocks planned computed and loaded.
  // The latest plan, step by step (where a plan's time goes): its split and costs when
  // made, the disk reads it started, and from its first attach how long the front took to
  // compute, the attaches themselves (matching what landed, copying it to the device) and
  // the blocks they joined; NaN and -1 until the first attach.
  struct LastLoadPlan {
    SequenceId seq = -1;
    int64_t fast_blocks = 0, slow_blocks = 0, compute_blocks = 0, load_blocks = 0;
    double load_seconds_per_block = 0, compute_seconds_per_block = 0, expected_seconds = 0;
    int64_t disk_reads_started = 0;
    std::chrono::steady_clock::time_point made;
    double front_computed_after_s = std::numeric_limits<double>::quiet_NaN();  // plan -> attach
    double attach_s = std::numeric_limits<double>::quiet_NaN();  // all its attaches together
    int64_t attached_blocks = -1;  // slow blocks joined (the rest computed)
    int64_t attaches = 0;          // attach attempts: more than one when the loads ran late
    // Where the plan stood at the start of each step of its prompt, and after the last
    // (the first kMaxPlanProgress): the front computed, the loads landed (blocks).
    struct Progress {
      double after_s = 0;           // since the plan was made
      int64_t computed_tokens = 0;  // the sequence's computed positions
      int64_t landed_from = 0;      // the first block of the landed run at the plan's end
      int64_t landed = 0;           // blocks landed after computed_blocks, in the run or not
      int64_t attach_at = 0;        // the block the next attach is planned at
    };
    std::vector<Progress> progress;
  };
  static constexpr size_t kMaxPlanProgress = 32;
  struct LoadPlanCounters {
    int64_t plans = 0;
    int64_t computed_blocks = 0;
    int64_t loaded_blocks = 0;
    LastLoadPlan last;  // meaningful when plans > 0
  };
  const LoadPlanCounters& load_plan_counters() const { return load_plans_; }

  // The queue invariants (both queues ordered, no sequence in both, running sequences
  // neither swapped out nor finished), the progress guarantee above and the KV manager's
  // invariants: Internal error naming the first violation, e.g. a Next() that scheduled
  // nothing while work was queued.
  absl::Status VerifyIntegrity() const;

 private:
  // Starts swapping in the paused sequences next in line while device blocks are free
  // (after scheduling, and at the end of a step when finished sequences have returned
  // theirs), so their blocks are back before the step that runs them; and has the KV
  // manager read ahead from disk what the next two waiting sequences will need.
  void PrefetchWaiting();
  // Pauses `victim`: swaps its KV out (policy permitting, room permitting) or drops it for
  // recompute, and queues it again.
  void Preempt(Sequence* victim);
  // Gives up `seq`'s device blocks the way a preemption would (swap or drop), without
  // touching the queues.
  void ReleaseDeviceBlocks(Sequence* seq);
  // Has the waiting sequence lowest in line that holds device blocks (a prefetched swap-in)
  // other than `keep` give them up (ReleaseDeviceBlocks). False when there is none.
  bool ReclaimPrefetched(const Sequence* keep);
  // Makes a waiting sequence's next chunk holdable on the device, keeping `keep_free`
  // blocks free: swaps it in or matches its prefix, then reserves. False (and nothing new
  // held) when it cannot run now.
  bool PrepareWaiting(Sequence* seq, int64_t budget, int64_t keep_free, int64_t* length);
  // Moves a prepared waiting sequence (the queue's head) to running and schedules its chunk.
  void Admit(Sequence* seq, int64_t length, Schedule* schedule);
  // Step 3 of Next(): nothing runs and the head of the queue could not be prepared. Takes
  // back the blocks waiting sequences behind it hold, then admits it without the
  // watermark; if even that fails it can never run (unrunnable).
  void EnsureProgress(int64_t budget, Schedule* schedule);
  // Device blocks a waiting sequence that holds none would take for its next chunk,
  // before any prefix reuse (an upper bound).
  int64_t BlocksToStart(const Sequence& seq) const;

  // Long sequences (see SchedulerOptions::max_long_running).
  // Device blocks left to sequences once pinned prefixes are counted out.
  // The most device blocks a sequence of `num_tokens` positions holds at once: all of its
  // blocks, or with layer groups what the windows leave (KvLayerGroups::SequencePeakBlocks).
  int64_t PeakBlocks(int64_t num_tokens) const;
  int64_t DeviceCapacity() const { return kv_->num_device_blocks() - kv_->num_pinned_blocks(); }
  // Whether the sequence's whole context (prompt + max_new_tokens) exceeds that.
  bool IsLong(const Sequence& seq) const;
  int64_t NumLongRunning() const;
  // How many of `seq`'s next tokens to feed, within `budget`: a chunk stops at the load
  // plan's attach_at; a long sequence's chunk spans at most half the device tier's blocks
  // (with layer groups, its blocks in every group together),
  // so that it prefills beside others in bounded device memory.
  int64_t ChunkLength(const Sequence& seq, int64_t budget) const;
  // A fresh prompt's first chunk (ChunkLength's `length` for it) when it has a whole step's
  // budget: a prompt longer than the budget starts with its remainder (what it has left modulo
  // max_tokens_per_step), so that its later chunks, the last included, fill the budget. The
  // last chunk attends to the longest context, where a backend's fastest prefill attention
  // may take only full chunks (the CUDA backend's cuDNN path); a short chunk costs least at
  // the front, where the context is short.
  int64_t FirstChunkLength(const Sequence& seq, int64_t budget, int64_t length) const;
  // For a long sequence short of device blocks: moves its own old blocks to the host tier
  // until `wanted` device blocks are available (or none is left to move). Whether any moved.
  absl::StatusOr<bool> MakeRoomByStreaming(Sequence* seq, int64_t wanted);
  // Under pressure, before anyone is preempted: `seq` itself if long, then the running long
  // sequences from the back of the line, stream old blocks until `wanted` are available.
  absl::StatusOr<bool> StreamForRoom(Sequence* seq, int64_t wanted);

  void DropForRecompute(Sequence* seq);
  void InsertWaiting(Sequence* sequence);
  // Load or recompute (scheduler_load_plan.cc). MatchOrPlan: a fresh sequence's prefix
  // match; when part of its prefix is only in a slow tier and the plan computes its front,
  // only the fast blocks are matched, the back's loads are started, and attach_at is set.
  // Attach: once the front is computed (num_computed == attach_at), the loaded blocks join
  // the sequence; when none has landed at the front yet but loads are still in flight
  // (they land from the back), NextAttach sets the next attach where computing on and
  // loading should meet, or -1 when the plan ends (the rest is computed). A long sequence
  // gets no plan (docs/LONG_CONTEXT.md): its prefix is matched from the tiers as they
  // stand, and what is not found is computed.
  int64_t MatchOrPlan(Sequence* seq);
  void Attach(Sequence* seq);
  int64_t NextAttach(Sequence* seq);
  // Appends the running plan's state to load_plans_.last.progress (its sequence only).
  void NotePlanProgress(Sequence* seq);
  // Between a plan's front steps: moves attach_at to where computing on and loading meet
  // now, by the speeds measured since the plan was made (the reads' and the front's own
  // steps'), or to the next step when everything to load has landed.
  void Replan(Sequence* seq);
  // The shortest chunk a re-planned attach asks for: a step's fixed cost (the weights read
  // once) is worth several blocks of prefill.
  static constexpr int64_t kMinAttachChunkBlocks = 8;

  SchedulerOptions options_;
  KvCacheManager* kv_;
  PreemptionPolicy* policy_;
  // Both ordered by (priority desc, arrival asc): the back is the first to be preempted.
  std::vector<Sequence*> running_;
  std::vector<Sequence*> waiting_;
  int64_t num_preemptions_ = 0;
  int64_t num_recomputes_ = 0;
  int64_t num_prefetches_reclaimed_ = 0;
  int64_t num_forks_queued_ = 0;
  // A backend copy failure met where only a bool can be returned (PrepareWaiting); Next()
  // returns it.
  absl::Status deferred_error_;
  LoadPlanCounters load_plans_;
  // Next() calls that returned no chunk and no unrunnable sequence while sequences were
  // queued: the progress guarantee broken (VerifyIntegrity reports it).
  int64_t num_stalled_schedules_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_SCHEDULER_H_
