// The sampling flags of `kvtier run` (sampling_flags.h).
#include "sampling_flags.h"

#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "numbers.h"

namespace kvtier::cli {

constexpr int64_t kMaxTopLogprobsFlag = 20;  // kvt_request_set_logprobs's range

namespace {

// "ID:BIAS" with ID a token id and BIAS in [-100, 100].
absl::StatusOr<std::pair<int32_t, float>> ParseBias(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() == 2) {
    absl::StatusOr<int64_t> token = ParseInteger(parts[0], 0, INT32_MAX);
    absl::StatusOr<double> bias = ParseReal(parts[1], -100, 100);
    if (token.ok() && bias.ok()) return std::make_pair(static_cast<int32_t>(*token), static_cast<float>(*bias));
  }
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not ID:BIAS (a token id and a bias in [-100, 100])"));
}

}  // namespace

void SamplingFlags::AddTo(CommandLine* cl) {
  cl->AddReal("--repetition-penalty", &repetition_penalty, 0, 3.4e38,
              "over prompt and generated tokens, > 0 (default 1 = off)", true, "P");
  cl->AddReal("--presence-penalty", &presence_penalty, -2, 2, "over generated tokens, -2..2 (default 0)", false, "P");
  cl->AddReal("--frequency-penalty", &frequency_penalty, -2, 2, "over generated tokens, -2..2 (default 0)", false,
              "P");
  cl->AddReal("--min-p", &min_p, 0, 1, "keep probabilities >= P x the largest, 0..1 (default 0)", false, "P");
  CommandLine::Normalized(
      cl->AddStrings("--logit-bias", &logit_bias, "add BIAS (-100..100) to token ID's logit (repeatable)", "ID:BIAS"),
      [](absl::string_view text) -> absl::StatusOr<std::string> {
        absl::StatusOr<std::pair<int32_t, float>> bias = ParseBias(text);
        if (!bias.ok()) return bias.status();
        return std::string(text);
      });
  cl->AddInt("--logprobs", &logprobs, 0, kMaxTopLogprobsFlag,
             "each generated token's log-probability and N alternatives, 0..20", "N");
  cl->AddInt("--prompt-logprobs", &prompt_logprobs, 0, kMaxTopLogprobsFlag,
             "the prompt tokens' log-probabilities and N alternatives, 0..20 (--json)", "N");
  cl->AddInt("--n", &n, 1, 128, "completions per prompt, sharing its KV blocks; completion i draws from seed + i",
             "N");
}

std::string SamplingFlags::Apply(kvt_request* r, const std::function<bool(const char*)>& given) const {
  kvt_status s = KVT_OK;
  using FloatSetter = kvt_status (*)(kvt_request*, float);
  const std::tuple<const char*, double, FloatSetter> reals[] = {
      {"--repetition-penalty", repetition_penalty, kvt_request_set_repetition_penalty},
      {"--presence-penalty", presence_penalty, kvt_request_set_presence_penalty},
      {"--frequency-penalty", frequency_penalty, kvt_request_set_frequency_penalty},
      {"--min-p", min_p, kvt_request_set_min_p}};
  for (const auto& [flag, value, set] : reals) {
    if (s == KVT_OK && given(flag)) s = set(r, static_cast<float>(value));
  }
  if (s == KVT_OK && !logit_bias.empty()) {
    std::vector<int32_t> tokens;
    std::vector<float> biases;
    for (const std::string& entry : logit_bias) {
      const std::pair<int32_t, float> bias = *ParseBias(entry);  // checked by the parser
      tokens.push_back(bias.first);
      biases.push_back(bias.second);
    }
    s = kvt_request_set_logit_bias(r, tokens.data(), biases.data(), static_cast<int32_t>(tokens.size()));
  }
  if (s == KVT_OK && given("--logprobs")) s = kvt_request_set_logprobs(r, logprobs);
  if (s == KVT_OK && given("--prompt-logprobs")) s = kvt_request_set_prompt_logprobs(r, prompt_logprobs);
  if (s == KVT_OK && given("--n")) s = kvt_request_set_n(r, n);
  return s == KVT_OK ? "" : kvt_request_errmsg(r);
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
