// Engine: one context's generation loop — sequences, scheduler, KV cache manager, backend,
// sampler. The step reads like the paper: schedule, forward (the backend samples), commit.
// Only the scheduler drives the KV manager; the engine reads its statistics.
// Thread-safety: Add, Cancel, ReadSequence, Release, Stats may be called from any thread
// at any time; Step from one thread at a time. The forward runs without the lock held, so
// adds and reads are not blocked by compute.
#ifndef KVTIER_ENGINE_ENGINE_H_
#define KVTIER_ENGINE_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "engine/engine_options.h"
#include "engine/grammar_masks.h"
#include "engine/idle_writer.h"
#include "engine/latency_histograms.h"
#include "engine/preemption_policy.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "grammar/grammar_cache.h"
#include "grammar/vocabulary.h"
#include "kv/kv_cache_manager.h"
#include "model/checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace kvtier {

struct StepEvent {
  SequenceId sequence = 0;
  std::optional<int32_t> token;  // absent for a cancellation or failure without a token
  FinishReason finish = FinishReason::kNone;
  std::string text;  // decoded text this token completes (with a tokenizer; may be empty)
  std::optional<TokenLogprobs> logprobs;  // the token's, when its request asked for them
};

class Engine {
 public:
  // Builds the backend, allocates the KV pools whole. InvalidArgument for bad options,
  // Unimplemented for an unusable backend, ResourceExhausted when budgets do not fit.
  // `tokenizer` may be null: then no text is produced and stop strings are refused.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      std::shared_ptr<const Checkpoint> checkpoint, const EngineOptions& options,
      std::shared_ptr<const tokenizer::Tokenizer> tokenizer = nullptr);
  ~Engine();

  // Admits a sequence: params.n completions, with consecutive ids from the one returned
  // (completion i draws with seed + i; they share the prompt's KV blocks once it is
  // computed, see Scheduler::Fork). InvalidArgument (empty prompt, id out of vocabulary,
  // prompt too long, a grammar without a tokenizer or one that does not compile for this
  // vocabulary), ResourceExhausted (can never fit), Unavailable (waiting queue full). A
  // grammar is compiled here, in the caller's thread (once per grammar: later adds hit the
  // cache).
  absl::StatusOr<SequenceId> Add(std::vector<int32_t> prompt, const SamplingParams& params);
  // NotFound for an unknown id, FailedPrecondition for a finished sequence.
  absl::Status Cancel(SequenceId id);
  // Calls fn with the sequence under the lock. NotFound for an unknown/released id.
  absl::Status ReadSequence(SequenceId id, const std::function<void(const Sequence&)>& fn);
  // Forgets a finished sequence. NotFound / FailedPrecondition (not finished).
  absl::Status Release(SequenceId id);
  int64_t NumUnfinished();

  // One iteration. Appends what happened to *events. A non-OK status means the forward
  // failed and no sequence advanced.
  absl::Status Step(std::vector<StepEvent>* events);

  nlohmann::json Stats();
  // Releases every pinned prefix (they stay cached, evictable again).
  void UnpinPrefixes();
  // The scheduler's invariants (progress included) and the KV cache manager's (tests call
  // it after every step).
  absl::Status VerifyIntegrity();
  const Backend& backend() const { return *backend_; }

 private:
  Engine(std::shared_ptr<const Checkpoint> checkpoint, const EngineOptions& options,
         std::unique_ptr<Backend> backend, std::unique_ptr<KvCacheManager> kv,
         std::shared_ptr<const tokenizer::Tokenizer> tokenizer);
  // Streams the token's text into the sequence and the event; true when a stop string
  // completed.
  bool AppendTextLocked(Sequence* seq, int32_t token, StepEvent* event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Emits text held back (incomplete characters, stop-string candidates) at the end.
  void FlushTextLocked(Sequence* seq, StepEvent* event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The cancellations requested since the last step: finished now, with their events.
  void ApplyCancelsLocked(std::vector<StepEvent>* events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the backend over the scheduled chunks (unlocked; stepping thread only): the sampled
  // tokens in step_tokens_, the compute time in last_compute_seconds_.
  absl::Status Forward(const Schedule& schedule);
  // Records a forward: the scheduler commits the KV positions, each sampled token is
  // appended (finishing its sequence when it stops), the next step is prepared.
  void CommitLocked(const Schedule& schedule, std::vector<StepEvent>* events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes a sequence: frees its blocks, records why, reports an event (unless events is
  // null: the caller reports it).
  void FinishLocked(Sequence* seq, FinishReason reason, std::optional<int32_t> token,
                    std::vector<StepEvent>* events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the token sampled after a chunk that reached the sequence's last token (with
  // its log-probabilities, when asked for: `logprobs` from sampling_result_) and decides
  // whether the sequence stops.
  void CommitTokenLocked(Sequence* seq, int32_t token, const LogprobEntry* logprobs,
                         std::chrono::steady_clock::time_point now, std::vector<StepEvent>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // engine_forward.cc: the step's sampling requests — one draw per logits row, or the
  // sampler chain's batch when a row needs more (adjustments, log-probabilities, scores,
  // the completions forked at it) — built unlocked by the stepping thread.
  void BuildSampling(const Schedule& schedule, ForwardBatch* batch);
  // The sampled tokens and scores of the step into their sequences (forks included).
  void CommitSamplesLocked(const Schedule& schedule, std::chrono::steady_clock::time_point now,
                           std::vector<StepEvent>* events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The prompt log-probabilities a scoring chunk produced.
  void CommitScoresLocked(Sequence* seq, const ScheduledChunk& chunk, int32_t first_row, int32_t first_score,
                          int32_t num_scores)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TokenLogprobs ToTokenLogprobs(const LogprobEntry& entry) const;
  bool IsStopToken(const Sequence& seq, int32_t token) const;
  // The matcher of a constrained request: compiled (or cached) grammar, end tokens.
  absl::StatusOr<std::unique_ptr<grammar::Matcher>> MakeMatcher(const SamplingParams& params);
  // Applies a grammar-constrained row's token; false when the sequence failed (finished).
  bool AcceptGrammarTokenLocked(Sequence* seq, size_t row, int32_t token, std::vector<StepEvent>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Step without the idle writer's bookkeeping (Step wraps it).
  absl::Status StepUnguarded(std::vector<StepEvent>* events);
  // The idle writer's thread: while the context is idle (no unfinished sequence, no step in
  // progress) and writes to the slow tiers are still queued or in flight, it moves them on
  // under the lock (KvCacheManager::PumpIdleWrites) every few milliseconds, so that blocks
  // reach the disk (a crash keeps them) and the remote tier (other processes find them)
  // without another step. It gives up when nothing lands for a while; the next step
  // resumes.
  // Moves them on once (under the lock); the blocks left, 0 when done or when the context
  // is not idle.
  int64_t PumpIdleWrites();

  const std::shared_ptr<const Checkpoint> checkpoint_;
  const EngineOptions options_;
  const std::unique_ptr<Backend> backend_;
  const std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::vector<int32_t> eos_token_ids_;

  // std::mutex, not absl::Mutex: TSan sees its happens-before edges (the system abseil is
  // not instrumented), and the idle writer takes it from its own thread.
  std::mutex mu_;
  // Declared after backend_: destroyed first, while it can still copy blocks out.
  const std::unique_ptr<KvCacheManager> kv_ ABSL_PT_GUARDED_BY(mu_);
  CostModelPolicy policy_ ABSL_GUARDED_BY(mu_);
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SequenceId, std::unique_ptr<Sequence>> sequences_ ABSL_GUARDED_BY(mu_);
  SequenceId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t num_unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  // Cancellations requested since the last step, applied at its start.
  std::vector<SequenceId> pending_cancels_ ABSL_GUARDED_BY(mu_);

  // Grammar-constrained generation: the tokenizer's tokens as bytes (built at the first
  // grammar), the compiled grammars (thread-safe), the step's masks (stepping thread;
  // declared after backend_: its memory is the backend's).
  absl::once_flag grammar_vocabulary_once_;
  std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary_;
  grammar::GrammarCache grammar_cache_;
  std::unique_ptr<GrammarMasks> grammar_masks_;

  // Owned by the stepping thread (reused across steps, never shrunk).
  std::vector<RowSampling> sampling_rows_;  // (logits rows) of the current step
  std::vector<int32_t> step_tokens_;         // (logits rows) the tokens the backend picked
  // When the step needs the sampler chain (use_chain_): its requests and results, and per
  // scheduled chunk where its samples and scores are.
  bool use_chain_ = false;
  SamplingBatch sampling_batch_;
  SamplingResult sampling_result_;
  struct ChunkSampling {
    int32_t sample = -1;       // its first sample (its own; forked completions follow), or -1
    int32_t first_row = 0;     // its first logits row
    int32_t first_score = 0;   // its scores: sampling_batch_.scores[first_score, + num_scores)
    int32_t num_scores = 0;
    std::vector<Sequence*> forks;  // the completions forked at this chunk's sample, in order
    std::vector<Rng> fork_rng;     // their random streams before this step's draw
  };
  std::vector<ChunkSampling> chunk_sampling_;
  double last_compute_seconds_ = 0;          // the last Forward's

  struct Counters {
    int64_t steps = 0;
    int64_t forwards = 0;
    int64_t prompt_tokens_computed = 0;
    int64_t generated_tokens = 0;
    int64_t finished = 0;
    int64_t grammar_completed = 0;
    int64_t grammar_failed = 0;
    int64_t cancelled = 0;
    int64_t failed = 0;
    int64_t logprob_tokens = 0;  // generated tokens reported with log-probabilities
    int64_t scored_tokens = 0;   // prompt tokens scored
    double step_seconds = 0;
    double compute_seconds = 0;
    double schedule_seconds = 0;
  } counters_ ABSL_GUARDED_BY(mu_);
  GrammarMasks::Counters grammar_mask_counters_ ABSL_GUARDED_BY(mu_);  // copied at each commit
  LatencyHistograms latencies_ ABSL_GUARDED_BY(mu_);

  bool stepping_ ABSL_GUARDED_BY(mu_) = false;          // a Step is in progress (its forward unlocked)
  int64_t idle_writer_pumps_ ABSL_GUARDED_BY(mu_) = 0;  // stats: its calls that found writes to move
  // The idle writer sleeps on its own std::mutex, not on mu_: a step ending idle wakes it,
  // the destructor stops it.
  std::unique_ptr<IdleWriter> idle_writer_;  // only with a disk or remote tier; destroyed first
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_ENGINE_H_
