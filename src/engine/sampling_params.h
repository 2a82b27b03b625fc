// SamplingParams: how one sequence picks its tokens and when it stops. Plain value type.
#ifndef KVTIER_ENGINE_SAMPLING_PARAMS_H_
#define KVTIER_ENGINE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grammar/grammar.h"

namespace kvtier {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;
  int32_t max_new_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's eos ids
  std::vector<std::string> stop_strings;  // matched on the decoded text (needs a tokenizer)
  bool ignore_eos = false;
  int32_t priority = 0;  // higher runs first, is preempted last
  bool pin_prefix = false;  // keep the prompt's full blocks on the device once computed
  // Structured output: the generated text must be a sentence of this grammar (from a JSON
  // schema or GBNF); null = unconstrained. Shared: requests are copied per sequence.
  std::shared_ptr<const grammar::Grammar> grammar;

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  // InvalidArgument naming the field when out of range: temperature, top_k and top_p as
  // backend/sampling_ranges.h says (the one statement of those ranges), max_new_tokens >= 1.
  absl::Status Validate() const;
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_SAMPLING_PARAMS_H_
