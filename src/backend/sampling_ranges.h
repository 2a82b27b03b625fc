// The valid ranges of the sampling parameters, stated once: SamplingParams::Validate
// (engine), the C API's request setters and ValidateRowSampling (backend) all check through
// these, so a value one layer accepts no other rejects. Here, below the engine, because the
// backend checks the rows it samples. Stateless; thread-safe.
#ifndef KVTIER_BACKEND_SAMPLING_RANGES_H_
#define KVTIER_BACKEND_SAMPLING_RANGES_H_

#include <cstdint>

#include "absl/status/status.h"

namespace kvtier {

// Each returns OK, or InvalidArgument "<name> must be <range>, got <value>".
// temperature: finite and >= 0 (0 = greedy).
absl::Status ValidateTemperature(float temperature);
// top_k: >= 0 (0 = off).
absl::Status ValidateTopK(int32_t top_k);
// top_p: in (0, 1] (1 = off).
absl::Status ValidateTopP(float top_p);
// min_p: in [0, 1] (0 = off).
absl::Status ValidateMinP(float min_p);
// repetition_penalty: finite and > 0 (1 = off), as transformers requires.
absl::Status ValidateRepetitionPenalty(float penalty);
// presence_penalty, frequency_penalty: in [-2, 2] (0 = off), OpenAI's range.
absl::Status ValidatePresencePenalty(float penalty);
absl::Status ValidateFrequencyPenalty(float penalty);
// One logit bias: in [-100, 100] (OpenAI's range; -100 in effect bans the token).
absl::Status ValidateLogitBias(float bias);
// Log-probability alternatives per token: in [-1, kMaxTopLogprobs] (-1 = no log-probabilities,
// 0 = the chosen token's only). `name` is the field reported.
inline constexpr int32_t kMaxTopLogprobs = 20;
absl::Status ValidateTopLogprobs(int32_t top_n, const char* name);
// n, completions per request: in [1, kMaxCompletions].
inline constexpr int32_t kMaxCompletions = 128;
absl::Status ValidateNumCompletions(int32_t n);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_SAMPLING_RANGES_H_
