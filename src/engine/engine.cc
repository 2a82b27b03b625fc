// Implementation of Engine (engine.h).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "backend/storage_dtype.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "engine/kv_layer_groups_choice.h"
#include "engine/kv_pool_size.h"
#include "engine/sampler.h"
#include "grammar/tokenizer_vocabulary.h"
#include "kv/tier_budgets.h"
#include "model/stable_hash.h"

namespace kvtier {
namespace {

// The longest a sequence may get: the model's context, or less where the backend is exact
// only that far.
int64_t MaxPositions(const ModelConfig& config, const Backend& backend) {
  const std::optional<PositionLimit> limit = backend.position_limit();
  return limit ? std::min(config.max_position_embeddings, limit->positions) : config.max_position_embeddings;
}

// Threads computing one step's grammar masks (a mask costs microseconds; more threads only
// matter for many constrained rows on a slow step).
int GrammarMaskThreads() {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency() / 4, 1u, 4u));
}

// A host or disk budget too small for one block turns its tier off without an error (0 is
// how a tier is switched off): say so, since the caller asked for the tier.
void LogDisabledTiers(const EngineOptions& options, int64_t block_bytes) {
  if (options.host_kv_bytes > 0 && options.host_kv_bytes < block_bytes) {
    Log(LogLevel::kWarn, "host tier disabled: host_kv_bytes ", options.host_kv_bytes, " holds no KV block of ",
        block_bytes, " bytes");
  }
  if (options.disk_kv_bytes > 0 && options.disk_kv_bytes < block_bytes) {
    Log(LogLevel::kWarn, "disk tier disabled: disk_kv_bytes ", options.disk_kv_bytes, " holds no KV block of ",
        block_bytes, " bytes");
  } else if (options.disk_kv_bytes == 0 && !options.disk_path.empty()) {
    Log(LogLevel::kInfo, "disk tier disabled: disk_path is set but disk_kv_bytes is 0");
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const Checkpoint> checkpoint,
                                                       const EngineOptions& options,
                                                       std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  if (checkpoint == nullptr) return absl::InvalidArgumentError("no model");
  RETURN_IF_ERROR(options.Validate());
  // A budget the machine cannot hold is refused before the weights are loaded (the KV
  // manager checks again with the exact file size).
  RETURN_IF_ERROR(CheckTierBudgetsFit(options.host_kv_bytes, options.disk_kv_bytes, options.disk_path, options.file_io));
  BackendOptions backend_options;
  backend_options.num_threads = options.num_threads;
  backend_options.block_tokens = options.block_tokens;
  backend_options.max_tokens_per_step = options.max_tokens_per_step;
  backend_options.max_sequences = options.max_running;
  backend_options.gpu_mem_limit_bytes = options.gpu_mem_limit;
  backend_options.cuda = options.cuda;
  backend_options.weight_dtype = options.weight_dtype;
  backend_options.kv_dtype = options.kv_dtype;
  backend_options.tensor_parallel = options.tensor_parallel;
  backend_options.devices = options.devices;
  backend_options.sharded_reduction = options.sharded_reduction;
  backend_options.progress = options.progress;
  ASSIGN_OR_RETURN(KvLayerGroupsChoice grouping, ChooseKvLayerGroups(options, checkpoint->config()));
  if (!grouping.why_one_group.empty()) Log(LogLevel::kInfo, "kv_layer_groups: one group: ", grouping.why_one_group);
  int64_t group_blocks_per_block = 1;
  if (grouping.groups.has_value()) {
    backend_options.kv_grouping = BackendGrouping(*grouping.groups);
    group_blocks_per_block = grouping.groups->num_layers() / grouping.groups->layers_per_group();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                   CreateBackend(options.backend, *checkpoint, backend_options));
  if (options.wrap_backend) backend = options.wrap_backend(std::move(backend));
  const int64_t block_bytes = static_cast<int64_t>(backend->kv_layout().BlockBytes());
  ASSIGN_OR_RETURN(const int64_t kv_bytes,
                   DeviceKvBytes(options, *backend, MaxPositions(checkpoint->config(), *backend), group_blocks_per_block));
  const int64_t num_blocks = kv_bytes / block_bytes;
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("gpu_kv_bytes ", kv_bytes,
                                                   " holds no KV block (one block of ", options.block_tokens,
                                                   " tokens is ", block_bytes, " bytes)"));
  }
  ProgressStage pools(options.progress, "kv_pools", 1);
  RETURN_IF_ERROR(pools.Begin());
  RETURN_IF_ERROR(backend->AllocateKvPool(num_blocks));
  KvCacheOptions kv_options;
  kv_options.block_tokens = options.block_tokens;
  kv_options.device_blocks = num_blocks;
  kv_options.host_blocks = options.host_kv_bytes / block_bytes;
  kv_options.disk_blocks = options.disk_kv_bytes / block_bytes;
  kv_options.disk_path = options.disk_path;
  kv_options.file_io = options.file_io;
  kv_options.prefix_cache = options.prefix_cache;
  kv_options.write_behind = options.disk_write_behind;
  kv_options.preparation = options.tier_preparation;
  kv_options.remote = options.remote;
  kv_options.layer_groups = std::move(grouping.groups);
  // With a slow tier the engine's idle writer moves what an idle step leaves queued, so the
  // step that ends the last request waits for no write (the Engine constructor starts it).
  if (kv_options.disk_blocks > 0 || !options.remote.url.empty()) kv_options.idle_drain_budget = {};
  // Cached KV is only valid for the same weights (and the format they are held in: fp8
  // weights compute other K/V than 16-bit ones), block geometry and KV element type.
  const KvLayout& layout = backend->kv_layout();
  const std::string geometry = absl::StrCat(checkpoint->Fingerprint(), "/", layout.block_tokens, "/",
                                            std::string(DTypeName(layout.dtype)), "/", std::string(backend->name()),
                                            "/weights:", std::string(StorageDTypeName(options.weight_dtype)));
  kv_options.model_fingerprint = Fnv1a64(geometry.data(), geometry.size());
  LogDisabledTiers(options, block_bytes);
  ASSIGN_OR_RETURN(std::unique_ptr<KvCacheManager> kv, KvCacheManager::Create(kv_options, backend.get()));
  RETURN_IF_ERROR(pools.End());
  ProgressStage warmup(options.progress, "warmup", 1);
  RETURN_IF_ERROR(warmup.Begin());
  // The host tier's pinning started in KvCacheManager::Create, so that it runs while the
  // disk tier's index is read (seconds for a large tier): a first request then finds host
  // slots for its loads. It pauses while the backend warms up, whose device calls would
  // otherwise wait behind the pins (CUDA's driver lock).
  kv->host().PausePinning();
  const absl::Status warmed = backend->WarmUp();
  kv->host().ResumePinning();
  RETURN_IF_ERROR(warmed);
  RETURN_IF_ERROR(warmup.End());
  kv->host().StartPinning();  // when the options left it to the engine (pin_host_at_create false)
  return std::unique_ptr<Engine>(
      new Engine(std::move(checkpoint), options, std::move(backend), std::move(kv), std::move(tokenizer)));
}

Engine::Engine(std::shared_ptr<const Checkpoint> checkpoint, const EngineOptions& options,
               std::unique_ptr<Backend> backend, std::unique_ptr<KvCacheManager> kv,
               std::shared_ptr<const tokenizer::Tokenizer> tokenizer)
    : checkpoint_(std::move(checkpoint)),
      options_(options),
      backend_(std::move(backend)),
      tokenizer_(std::move(tokenizer)),
      eos_token_ids_(checkpoint_->config().eos_token_ids),
      kv_(std::move(kv)),
      policy_(options.preemption, static_cast<int64_t>(backend_->kv_layout().BlockBytes()),
              kv_->host().on() || kv_->disk().on()),
      scheduler_(SchedulerOptions{options.max_tokens_per_step, options.max_running,
                                  std::min<int64_t>(options.watermark_blocks, kv_->num_device_blocks() / 8),
                                  options.load_or_recompute,
                                  backend_->ReadsHostResidentKv() ? options.max_long_running : 0,
                                  backend_->MaxHostResidentBlocks(),
                                  backend_->ReadsHostResidentKv() ? "max_long_running is 0"
                                                                  : backend_->WhyNoHostResidentKv()},
                 kv_.get(), &policy_),
      grammar_masks_(std::make_unique<GrammarMasks>(backend_.get(), static_cast<int32_t>(checkpoint_->config().vocab_size),
                                                    GrammarMaskThreads())) {
  // generation_config.json's eos ids, and the tokenizer's generation stop ids, end
  // sequences too.
  auto add_stop_id = [this](int32_t id) {
    if (std::find(eos_token_ids_.begin(), eos_token_ids_.end(), id) == eos_token_ids_.end()) eos_token_ids_.push_back(id);
  };
  for (int32_t id : checkpoint_->generation_config().eos_token_ids) add_stop_id(id);
  if (tokenizer_ != nullptr) {
    for (int32_t id : tokenizer_->stop_ids()) add_stop_id(id);
  }
  if (kv_->disk().on() || !options_.remote.url.empty()) {
    // The step that ends the last request returns at once (Create set the KV manager's
    // idle_drain_budget to 0); its writes go on in the background.
    idle_writer_ = std::make_unique<IdleWriter>([this] { return PumpIdleWrites(); });
  }
}

Engine::~Engine() {
  idle_writer_.reset();  // before the members its pump uses
}

int64_t Engine::PumpIdleWrites() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stepping_ || num_unfinished_ > 0) return 0;  // the next idle step wakes the writer again
  const int64_t left = scheduler_.PumpIdleWrites();
  if (left > 0) ++idle_writer_pumps_;
  return left;
}

absl::StatusOr<SequenceId> Engine::Add(std::vector<int32_t> prompt, const SamplingParams& params) {
  RETURN_IF_ERROR(params.Validate());
  RETURN_IF_ERROR(ValidateCacheNamespace(params.cache_namespace));
  const ModelConfig& config = checkpoint_->config();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", prompt[i],
                                                     ", outside the vocabulary [0, ", config.vocab_size, ")"));
    }
  }
  for (int32_t id : params.stop_token_ids) {
    if (id < 0 || id >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("stop token ", id, " is outside the vocabulary [0, ",
                                                     config.vocab_size, ")"));
    }
  }
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("logit bias token ", id, " is outside the vocabulary [0, ",
                                                     config.vocab_size, ")"));
    }
  }
  if (!params.stop_strings.empty() && tokenizer_ == nullptr) {
    return absl::InvalidArgumentError("stop strings need a tokenizer, and this model has no tokenizer.json");
  }
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t max_positions = MaxPositions(config, *backend_);
  if (prompt_len >= max_positions) {
    const std::optional<PositionLimit> limit = backend_->position_limit();
    if (limit && limit->positions == max_positions) {
      return absl::InvalidArgumentError(
          absl::StrCat("the prompt has ", prompt_len, " tokens; ", limit->reason, " (", max_positions, " positions)"));
    }
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt_len, " tokens; the model's context is ",
                                                   config.max_position_embeddings, " positions"));
  }
  // The longest the sequence can get: its KV must fit in the device tier at once.
  const int64_t max_len = std::min<int64_t>(prompt_len + params.max_new_tokens, max_positions);
  // Compiling a grammar takes a while the first time: before the lock. Each completion
  // follows the grammar on its own.
  std::vector<std::unique_ptr<grammar::Matcher>> matchers(static_cast<size_t>(params.n));
  if (params.grammar != nullptr) {
    for (auto& matcher : matchers) {
      ASSIGN_OR_RETURN(matcher, MakeMatcher(params));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(scheduler_.CheckFits(max_len));
  if (scheduler_.num_waiting() >= options_.max_waiting) {
    return absl::UnavailableError(absl::StrCat("the waiting queue is full (", options_.max_waiting,
                                               " sequences): retry after some finish"));
  }
  // Parallel sampling: completion i is its own sequence, id first + i, drawing with seed + i
  // (so each equals the request run alone with that seed). The first computes the prompt;
  // the others wait, in no queue, to be forked from it (CommitSamplesLocked).
  const SequenceId first = next_id_;
  next_id_ += params.n;
  Sequence* parent = nullptr;
  for (int32_t i = 0; i < params.n; ++i) {
    SamplingParams completion = params;
    completion.n = 1;
    // The budget of new tokens ends where the positions do: the finish check per token then
    // compares one count, and the scheduler's size estimates see the real length.
    completion.max_new_tokens = static_cast<int32_t>(max_len - prompt_len);
    completion.seed = params.seed + static_cast<uint64_t>(i);
    if (i > 0) completion.prompt_logprobs = -1;  // the prompt is scored once, on the first
    const SequenceId id = first + i;
    auto seq = std::make_unique<Sequence>(id, id, i == 0 ? std::move(prompt) : parent->tokens, std::move(completion));
    seq->block_keys = scheduler_.KeyChain(params.cache_namespace);
    seq->matcher = std::move(matchers[static_cast<size_t>(i)]);
    if (tokenizer_ != nullptr) {
      tokenizer::DecodeOptions decode;
      decode.skip_special_tokens = true;
      // The text of a constrained sequence is exactly the bytes its grammar matched.
      if (seq->matcher != nullptr) decode.clean_up_tokenization_spaces = false;
      seq->detokenizer = std::make_unique<tokenizer::StreamDecoder>(tokenizer_.get(), decode, seq->tokens);
      if (!params.stop_strings.empty()) seq->stop_strings = std::make_unique<tokenizer::StopStringMatcher>(params.stop_strings);
    }
    if (i == 0) {
      parent = seq.get();
      scheduler_.Enqueue(parent);
    } else {
      seq->fork_parent = parent;
      parent->fork_children.push_back(seq.get());
    }
    sequences_.emplace(id, std::move(seq));
    ++num_unfinished_;
  }
  return first;
}

absl::StatusOr<std::unique_ptr<grammar::Matcher>> Engine::MakeMatcher(const SamplingParams& params) {
  if (tokenizer_ == nullptr) {
    return absl::InvalidArgumentError(
        "a grammar (JSON schema or GBNF) needs the model's tokenizer, and this model has no tokenizer.json");
  }
  absl::call_once(grammar_vocabulary_once_, [&] {
    grammar_vocabulary_ = grammar::VocabularyFromTokenizer(
        *tokenizer_, static_cast<int32_t>(checkpoint_->config().vocab_size));
  });
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
      grammar_cache_.Get(*params.grammar, grammar_vocabulary_);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(), absl::StrCat("grammar: ", compiled.status().message()));
  }
  // End tokens (allowed only once the output is complete): the stop ids, and eos unless
  // ignored.
  std::vector<int32_t> ends = params.stop_token_ids;
  if (!params.ignore_eos) ends.insert(ends.end(), eos_token_ids_.begin(), eos_token_ids_.end());
  return std::make_unique<grammar::Matcher>(*std::move(compiled), std::move(ends));
}

absl::Status Engine::Cancel(SequenceId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& seq = *it->second;
  if (seq.finished()) return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " already finished"));
  if (seq.cancel_requested) return absl::OkStatus();
  seq.cancel_requested = true;
  pending_cancels_.push_back(id);
  return absl::OkStatus();
}

absl::Status Engine::ReadSequence(SequenceId id, const std::function<void(const Sequence&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  fn(*it->second);
  return absl::OkStatus();
}

absl::Status Engine::Release(SequenceId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  if (!it->second->finished()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " has not finished: cancel it first"));
  }
  sequences_.erase(it);
  return absl::OkStatus();
}

int64_t Engine::NumUnfinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return num_unfinished_;
}

void Engine::FinishLocked(Sequence* seq, FinishReason reason, std::optional<int32_t> token,
                          std::vector<StepEvent>* events) {
  // A completion still waiting for its fork leaves its parent's list; completions whose
  // parent ends before computing the prompt compute it themselves.
  if (seq->fork_parent != nullptr) {
    std::erase(seq->fork_parent->fork_children, seq);
    seq->fork_parent = nullptr;
  }
  for (Sequence* child : seq->fork_children) {
    child->fork_parent = nullptr;
    scheduler_.Enqueue(child);
  }
  seq->fork_children.clear();
  scheduler_.Remove(seq);
  seq->state = SequenceState::kFinished;
  seq->finish = reason;
  --num_unfinished_;
  // "finished" counts every end, like the FINISHED state; the reasons split it.
  ++counters_.finished;
  if (reason == FinishReason::kCancelled) ++counters_.cancelled;
  if (reason == FinishReason::kGrammar) ++counters_.grammar_completed;
  if (reason == FinishReason::kError) ++counters_.failed;
  if (events != nullptr) events->push_back({seq->id, token, reason, {}, std::nullopt});
}

bool Engine::IsStopToken(const Sequence& seq, int32_t token) const {
  if (std::find(seq.params.stop_token_ids.begin(), seq.params.stop_token_ids.end(), token) !=
      seq.params.stop_token_ids.end()) {
    return true;
  }
  return !seq.params.ignore_eos &&
         std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end();
}

bool Engine::AppendTextLocked(Sequence* seq, int32_t token, StepEvent* event) {
  if (seq->detokenizer == nullptr) return false;
  absl::StatusOr<std::string> piece = seq->detokenizer->Add(token);
  if (!piece.ok()) return false;  // an id the tokenizer lacks (vocab larger than tokenizer): no text
  if (seq->stop_strings == nullptr) {
    event->text = std::move(*piece);
  } else {
    tokenizer::StopStringMatcher::Result r = seq->stop_strings->Add(*piece);
    event->text = std::move(r.text);
    if (r.stop_index.has_value()) {
      seq->text += event->text;
      return true;
    }
  }
  seq->text += event->text;
  return false;
}

void Engine::FlushTextLocked(Sequence* seq, StepEvent* event) {
  if (seq->detokenizer == nullptr || (seq->stop_strings != nullptr && seq->stop_strings->stopped())) return;
  std::string tail = seq->detokenizer->Flush().value_or("");
  if (seq->stop_strings != nullptr) {
    tokenizer::StopStringMatcher::Result r = seq->stop_strings->Add(tail);
    tail = std::move(r.text);
    if (!r.stop_index.has_value()) tail += seq->stop_strings->Flush();
  }
  event->text += tail;
  seq->text += tail;
}

void Engine::CommitTokenLocked(Sequence* seq, int32_t token, const LogprobEntry* logprobs,
                               std::chrono::steady_clock::time_point now, std::vector<StepEvent>* events) {
  if (seq->num_generated() == 0) {
    latencies_.time_to_first_token.Observe(std::chrono::duration<double>(now - seq->added_at).count());
  } else {
    latencies_.inter_token_latency.Observe(std::chrono::duration<double>(now - seq->last_token_at).count());
  }
  seq->last_token_at = now;
  seq->tokens.push_back(token);
  seq->history.AddGenerated(token);
  ++counters_.generated_tokens;
  StepEvent event{seq->id, token, FinishReason::kNone, {}, std::nullopt};
  if (logprobs != nullptr) {
    event.logprobs = ToTokenLogprobs(*logprobs);
    seq->generated_logprobs.push_back(*event.logprobs);
    ++counters_.logprob_tokens;
  }
  const bool stop_string = AppendTextLocked(seq, token, &event);
  if (seq->matcher != nullptr && seq->matcher->terminated()) {
    event.finish = FinishReason::kGrammar;
  } else if (stop_string || IsStopToken(*seq, token)) {
    event.finish = FinishReason::kStop;
  } else if (seq->num_generated() >= seq->params.max_new_tokens) {  // the positions' end included (Add)
    event.finish = FinishReason::kLength;
  }
  if (event.finish != FinishReason::kNone) {
    FlushTextLocked(seq, &event);
    FinishLocked(seq, event.finish, std::nullopt, nullptr);
  }
  events->push_back(std::move(event));
}

bool Engine::AcceptGrammarTokenLocked(Sequence* seq, size_t row, int32_t token, std::vector<StepEvent>* events) {
  grammar::Matcher& m = *seq->matcher;
  if (grammar_masks_->AllowsNothing(row) && m.terminated()) {
    // A grammar whose only sentence is empty: complete before any token.
    FinishLocked(seq, FinishReason::kGrammar, std::nullopt, events);
    return false;
  }
  if (grammar_masks_->AllowsNothing(row)) {
    seq->error = !m.status().ok() ? std::string(m.status().message())
                                  : "grammar: no token of the vocabulary can continue the output here";
  } else if (!m.AcceptToken(token)) {
    // Cannot come from a mask-respecting sampler; kept as a guard so an output never breaks
    // its grammar.
    seq->error = absl::StrCat("grammar: the sampler picked token ", token, ", which the grammar does not allow here");
  } else {
    return true;
  }
  ++counters_.grammar_failed;
  FinishLocked(seq, FinishReason::kError, std::nullopt, events);
  return false;
}

absl::Status Engine::Step(std::vector<StepEvent>* events) {
  if (idle_writer_ == nullptr) return StepUnguarded(events);  // no slow tier: nothing to write when idle
  {
    std::lock_guard<std::mutex> lock(mu_);
    stepping_ = true;  // the idle writer keeps off the KV manager until the step ends
  }
  const absl::Status stepped = StepUnguarded(events);
  bool idle = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stepping_ = false;
    idle = num_unfinished_ == 0;
  }
  // Idle now: the writes the step's FinishStep left queued go on in the background.
  if (idle) idle_writer_->Wake();
  return stepped;
}

absl::Status Engine::StepUnguarded(std::vector<StepEvent>* events) {
  const auto step_start = std::chrono::steady_clock::now();
  Schedule schedule;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ApplyCancelsLocked(events);
    ASSIGN_OR_RETURN(schedule, scheduler_.Next());
    for (Sequence* seq : schedule.unrunnable) FinishLocked(seq, FinishReason::kError, std::nullopt, events);
    counters_.schedule_seconds += SecondsSince(step_start);
  }
  if (schedule.chunks.empty()) return absl::OkStatus();
  // Unlocked: adds and reads are not blocked by compute. The chunks' tokens and blocks stay
  // valid: only this thread appends tokens or changes block tables, and running sequences
  // cannot be released.
  const absl::Status forward = Forward(schedule);
  std::lock_guard<std::mutex> lock(mu_);
  counters_.compute_seconds += last_compute_seconds_;
  if (!forward.ok()) return forward;
  CommitLocked(schedule, events);
  const double step_seconds = SecondsSince(step_start);
  counters_.step_seconds += step_seconds;
  latencies_.step_duration.Observe(step_seconds);
  return absl::OkStatus();
}

void Engine::ApplyCancelsLocked(std::vector<StepEvent>* events) {
  for (SequenceId id : pending_cancels_) {
    auto it = sequences_.find(id);
    if (it != sequences_.end() && !it->second->finished()) {
      FinishLocked(it->second.get(), FinishReason::kCancelled, std::nullopt, events);
    }
  }
  pending_cancels_.clear();
}

void Engine::UnpinPrefixes() {
  std::lock_guard<std::mutex> lock(mu_);
  scheduler_.UnpinPrefixes();
}

absl::Status Engine::VerifyIntegrity() {
  std::lock_guard<std::mutex> lock(mu_);
  return scheduler_.VerifyIntegrity();
}

}  // namespace kvtier
