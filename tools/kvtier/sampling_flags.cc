// The sampling flags of `kvtier run` (sampling_flags.h).
#include "sampling_flags.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvtier::cli {

const std::set<std::string> kSamplingFlags = {"repetition-penalty", "presence-penalty", "frequency-penalty",
                                              "min-p", "logit-bias", "logprobs", "prompt-logprobs", "n"};

const char kSamplingUsage[] = R"(  --repetition-penalty P   over prompt and generated tokens, > 0 (default 1 = off)
  --presence-penalty P     over generated tokens, -2..2 (default 0)
  --frequency-penalty P    over generated tokens, -2..2 (default 0)
  --min-p P                keep probabilities >= P x the largest, 0..1 (default 0)
  --logit-bias ID:BIAS     add BIAS (-100..100) to token ID's logit (repeatable)
  --logprobs N             each generated token's log-probability and N alternatives
                           (0..20; in --json output and the streamed lines)
  --prompt-logprobs N      the prompt tokens' log-probabilities and N alternatives (--json)
  --n N                    completions per prompt, sharing its KV blocks (default 1);
                           completion i draws from the prompt's seed + i
)";

namespace {

absl::Status Invalid(const std::string& flag, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", message));
}

}  // namespace

absl::Status ApplySamplingFlags(const Args& args, kvt_request* r) {
  using FloatSetter = kvt_status (*)(kvt_request*, float);
  const std::pair<const char*, FloatSetter> floats[] = {{"repetition-penalty", kvt_request_set_repetition_penalty},
                                                        {"presence-penalty", kvt_request_set_presence_penalty},
                                                        {"frequency-penalty", kvt_request_set_frequency_penalty},
                                                        {"min-p", kvt_request_set_min_p}};
  for (const auto& [flag, set] : floats) {
    if (!args.Has(flag)) continue;
    absl::StatusOr<double> value = args.GetDouble(flag, 0.0);
    if (!value.ok()) return value.status();
    if (set(r, static_cast<float>(*value)) != KVT_OK) return Invalid(flag, kvt_request_errmsg(r));
  }
  using IntSetter = kvt_status (*)(kvt_request*, int32_t);
  const std::pair<const char*, IntSetter> ints[] = {
      {"logprobs", kvt_request_set_logprobs}, {"prompt-logprobs", kvt_request_set_prompt_logprobs}, {"n", kvt_request_set_n}};
  for (const auto& [flag, set] : ints) {
    if (!args.Has(flag)) continue;
    absl::StatusOr<int64_t> value = args.GetInt(flag, 0);
    if (!value.ok()) return value.status();
    if (*value < INT32_MIN || *value > INT32_MAX || set(r, static_cast<int32_t>(*value)) != KVT_OK) {
      return Invalid(flag, kvt_request_errmsg(r));
    }
  }
  std::vector<int32_t> tokens;
  std::vector<float> biases;
  for (const std::string& entry : args.GetAll("logit-bias")) {
    std::vector<std::string> parts = absl::StrSplit(entry, ':');
    int32_t token = 0;
    float bias = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &token) || !absl::SimpleAtof(parts[1], &bias)) {
      return Invalid("logit-bias", "'" + entry + "' is not ID:BIAS");
    }
    tokens.push_back(token);
    biases.push_back(bias);
  }
  if (!tokens.empty() &&
      kvt_request_set_logit_bias(r, tokens.data(), biases.data(), static_cast<int32_t>(tokens.size())) != KVT_OK) {
    return Invalid("logit-bias", kvt_request_errmsg(r));
  }
  return absl::OkStatus();
}

namespace {

nlohmann::json TopJson(const std::vector<int32_t>& tokens, const std::vector<float>& logprobs, int32_t n) {
  nlohmann::json top = nlohmann::json::array();
  for (int32_t j = 0; j < n; ++j) top.push_back({{"token", tokens[static_cast<size_t>(j)]}, {"logprob", logprobs[static_cast<size_t>(j)]}});
  return top;
}

}  // namespace

nlohmann::json EventLogprobsJson(const kvt_events* events, int32_t i, int32_t token) {
  float logprob = 0;
  int32_t num_top = 0;
  if (kvt_events_logprob(events, i, &logprob, &num_top) != KVT_OK) return nullptr;
  std::vector<int32_t> tokens(static_cast<size_t>(num_top));
  std::vector<float> logprobs(static_cast<size_t>(num_top));
  int32_t n = 0;
  kvt_events_top_logprobs(events, i, tokens.data(), logprobs.data(), num_top, &n);
  return {{"token", token}, {"logprob", logprob}, {"top", TopJson(tokens, logprobs, std::min(n, num_top))}};
}

nlohmann::json PromptLogprobsJson(kvt_context* context, int64_t id, const int32_t* prompt, int32_t prompt_len) {
  int32_t count = 0;
  if (kvt_sequence_prompt_logprobs(context, id, nullptr, 0, &count) != KVT_OK) return nullptr;
  std::vector<float> values(static_cast<size_t>(count));
  kvt_sequence_prompt_logprobs(context, id, values.data(), count, &count);
  nlohmann::json out = nlohmann::json::array();
  std::vector<int32_t> tokens(20);
  std::vector<float> logprobs(20);
  for (int32_t j = 0; j < count && (prompt == nullptr || j + 1 < prompt_len); ++j) {
    int32_t n = 0;
    kvt_sequence_prompt_top_logprobs(context, id, j, tokens.data(), logprobs.data(), 20, &n);
    nlohmann::json entry = {{"logprob", values[static_cast<size_t>(j)]}, {"top", TopJson(tokens, logprobs, std::min(n, 20))}};
    if (prompt != nullptr) entry["token"] = prompt[j + 1];
    out.push_back(entry);
  }
  return out;
}

}  // namespace kvtier::cli
