// The sampler-chain, log-probability and parallel-sampling flags of `kvtier run`: their
// definitions, how they set a kvt_request, and the log-probabilities read back as JSON.
// Not thread-safe (one command at a time).
#ifndef KVTIER_TOOLS_KVTIER_SAMPLING_FLAGS_H_
#define KVTIER_TOOLS_KVTIER_SAMPLING_FLAGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "command_line.h"
#include "kvtier/kvtier.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {

struct SamplingFlags {
  double repetition_penalty = 1, presence_penalty = 0, frequency_penalty = 0, min_p = 0;
  std::vector<std::string> logit_bias;  // "ID:BIAS" each, checked when parsed
  int32_t logprobs = -1, prompt_logprobs = -1, n = 1;

  // Adds the flags to `command_line`; values land in this object.
  void AddTo(CommandLine* command_line);
  // Sets the flags the command line gave (`given(flag)`) on the request (the others keep
  // the request's defaults, generation_config.json's repetition penalty included); "" or
  // the library's message.
  std::string Apply(kvt_request* request, const std::function<bool(const char*)>& given) const;
};

// Event i's log-probability as {"token", "logprob", "top": [{"token", "logprob"}...]}, or
// null when the event carries none.
nlohmann::json EventLogprobsJson(const kvt_events* events, int32_t i, int32_t token);
// A finished sequence's prompt log-probabilities, one object per prompt token from the
// second on (as EventLogprobsJson's, "token" being the prompt token scored; left out when
// `prompt` is null: a chat prompt, whose tokens the CLI does not see).
nlohmann::json PromptLogprobsJson(kvt_context* context, int64_t id, const int32_t* prompt, int32_t prompt_len);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_SAMPLING_FLAGS_H_
