// Sequence: one generation request's state — its tokens, how many of them are in the KV
// cache, its life-cycle state. Owned by the Engine; read and written under the engine lock.
#ifndef KVTIER_ENGINE_SEQUENCE_H_
#define KVTIER_ENGINE_SEQUENCE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/logprobs.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/token_history.h"
#include "grammar/matcher.h"
#include "kv/kv_cache_manager.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/stream_decoder.h"

namespace kvtier {

enum class SequenceState { kWaiting = 0, kRunning = 1, kPaused = 2, kFinished = 3 };
// kGrammar: the output is a complete sentence of the sequence's grammar (nothing more could
// follow, or an end token came when it was complete).
enum class FinishReason { kNone = 0, kStop = 1, kLength = 2, kCancelled = 3, kError = 4, kGrammar = 5 };

// One token's log-probability and its most likely alternatives (SamplingParams::logprobs).
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

struct Sequence {
  Sequence(SequenceId id, int64_t arrival, std::vector<int32_t> prompt, SamplingParams params)
      : id(id), arrival(arrival), params(std::move(params)), tokens(std::move(prompt)),
        num_prompt_tokens(static_cast<int64_t>(tokens.size())), rng(this->params.seed),
        history(this->params, tokens) {}

  const SequenceId id;
  const int64_t arrival;         // admission order: earlier arrivals are preempted last
  const SamplingParams params;
  std::vector<int32_t> tokens;   // prompt, then generated tokens
  const int64_t num_prompt_tokens;
  int64_t num_computed = 0;      // positions [0, num_computed) have K/V in the cache
  // Load plan (scheduler_load_plan.cc): once positions [0, attach_at) are computed, the
  // blocks loaded from a slow tier meanwhile join the sequence; -1 when there is none. The
  // plan's loads end at position load_end.
  int64_t attach_at = -1;
  int64_t load_end = -1;
  SequenceState state = SequenceState::kWaiting;
  FinishReason finish = FinishReason::kNone;
  std::string error;             // why it failed, for FinishReason::kError
  bool cancel_requested = false;
  bool prefix_pinned = false;
  // The prefix-cache keys of its blocks, in its cache namespace (params.cache_namespace),
  // set by the engine; unset (tests): the default namespace's, computed on each use.
  std::optional<BlockKeyChain> block_keys;
  Rng rng;
  TokenHistory history;  // what the penalties and the bias need
  // With params.logprobs >= 0: one entry per generated token. With params.prompt_logprobs
  // >= 0: one per prompt token from the second on (entry i scores token i + 1).
  std::vector<TokenLogprobs> generated_logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;
  // Parallel sampling: the request's other completions, waiting (in no queue) until this
  // sequence has computed the prompt; they are forked from it then and the list cleared.
  std::vector<Sequence*> fork_children;
  Sequence* fork_parent = nullptr;  // while waiting in the parent's fork_children
  // Text of the generated tokens, streamed (only with a tokenizer).
  std::unique_ptr<tokenizer::StreamDecoder> detokenizer;
  std::unique_ptr<tokenizer::StopStringMatcher> stop_strings;
  std::string text;
  // Grammar-constrained sequences: where the output stands in the grammar. Kept across
  // preemption (a recompute replays the KV, not the tokens).
  std::unique_ptr<grammar::Matcher> matcher;
  // When it was added, and when its last token was produced (latency histograms).
  std::chrono::steady_clock::time_point added_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_token_at;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_generated() const { return num_tokens() - num_prompt_tokens; }
  // Tokens still to feed before the next sample (1 while decoding).
  int64_t num_uncomputed() const { return num_tokens() - num_computed; }
  bool finished() const { return state == SequenceState::kFinished; }
  BlockKeyChain* keys() { return block_keys.has_value() ? &*block_keys : nullptr; }
  // Prompt log-probabilities still to be computed.
  bool scoring_prompt() const {
    return params.prompt_logprobs >= 0 && static_cast<int64_t>(prompt_logprobs.size()) + 1 < num_prompt_tokens;
  }
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_SEQUENCE_H_
