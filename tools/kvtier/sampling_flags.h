// The sampler-chain, log-probability and parallel-sampling flags of `kvtier run`: their
// names, their usage lines, how they set a kvt_request, and the log-probabilities read
// back as JSON. Not thread-safe (one command at a time).
#ifndef KVTIER_TOOLS_KVTIER_SAMPLING_FLAGS_H_
#define KVTIER_TOOLS_KVTIER_SAMPLING_FLAGS_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "args.h"
#include "kvtier/kvtier.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {

// The flags (all take a value).
extern const std::set<std::string> kSamplingFlags;
// Their usage lines, for the command's help.
extern const char kSamplingUsage[];

// Sets every sampling flag given on the request; InvalidArgument naming the flag.
absl::Status ApplySamplingFlags(const Args& args, kvt_request* request);

// Event i's log-probability as {"token", "logprob", "top": [{"token", "logprob"}...]}, or
// null when the event carries none.
nlohmann::json EventLogprobsJson(const kvt_events* events, int32_t i, int32_t token);
// A finished sequence's prompt log-probabilities, one object per prompt token from the
// second on (as EventLogprobsJson's, "token" being the prompt token scored; left out when
// `prompt` is null: a chat prompt, whose tokens the CLI does not see).
nlohmann::json PromptLogprobsJson(kvt_context* context, int64_t id, const int32_t* prompt, int32_t prompt_len);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_SAMPLING_FLAGS_H_
