// SamplingParams: how one sequence picks its tokens, what it reports about them, and when
// it stops. Plain value type.
#ifndef KVTIER_ENGINE_SAMPLING_PARAMS_H_
#define KVTIER_ENGINE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "grammar/grammar.h"

namespace kvtier {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;
  // The sampler chain's penalties and bias (backend/sampler_chain.h gives the order).
  float repetition_penalty = 1.0f;  // 1 = off; over prompt and generated tokens
  float presence_penalty = 0.0f;    // 0 = off; over generated tokens
  float frequency_penalty = 0.0f;   // 0 = off; over generated tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias), tokens distinct
  // Log-probabilities: -1 = off; 0..20 = each token's, with that many alternatives.
  int32_t logprobs = -1;         // of the generated tokens
  int32_t prompt_logprobs = -1;  // of the prompt tokens (from the second on): scoring
  // Completions of the prompt (parallel sampling): completion i draws with seed + i.
  int32_t n = 1;
  int32_t max_new_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's eos ids
  std::vector<std::string> stop_strings;  // matched on the decoded text (needs a tokenizer)
  bool ignore_eos = false;
  int32_t priority = 0;  // higher runs first, is preempted last
  bool pin_prefix = false;  // keep the prompt's full blocks on the device once computed
  // Prefix-cache blocks are shared only between sequences of the same namespace ("" is the
  // default one): UTF-8 without NUL, at most kMaxCacheNamespaceBytes (kv/block_hash.h).
  std::string cache_namespace;
  // Structured output: the generated text must be a sentence of this grammar (from a JSON
  // schema or GBNF); null = unconstrained. Shared: requests are copied per sequence.
  std::shared_ptr<const grammar::Grammar> grammar;

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  // InvalidArgument naming the field when out of range: every range as
  // backend/sampling_ranges.h says (the one statement of them), logit bias tokens >= 0 and
  // distinct, max_new_tokens >= 1. Token ids are checked against the vocabulary by the
  // engine, which knows it.
  absl::Status Validate() const;
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_SAMPLING_PARAMS_H_
