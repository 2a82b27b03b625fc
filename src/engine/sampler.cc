// Implementation of SampleToken and SamplingParams::Validate.
#include "engine/sampler.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "backend/sampling_ranges.h"
#include "common/status_macros.h"

namespace kvtier {

absl::Status SamplingParams::Validate() const {
  RETURN_IF_ERROR(ValidateTemperature(temperature));
  RETURN_IF_ERROR(ValidateTopK(top_k));
  RETURN_IF_ERROR(ValidateTopP(top_p));
  RETURN_IF_ERROR(ValidateMinP(min_p));
  RETURN_IF_ERROR(ValidateRepetitionPenalty(repetition_penalty));
  RETURN_IF_ERROR(ValidatePresencePenalty(presence_penalty));
  RETURN_IF_ERROR(ValidateFrequencyPenalty(frequency_penalty));
  RETURN_IF_ERROR(ValidateTopLogprobs(logprobs, "logprobs"));
  RETURN_IF_ERROR(ValidateTopLogprobs(prompt_logprobs, "prompt_logprobs"));
  RETURN_IF_ERROR(ValidateNumCompletions(n));
  absl::flat_hash_set<int32_t> biased;
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) return absl::InvalidArgumentError(absl::StrCat("logit bias token ", token, " is negative"));
    if (!biased.insert(token).second) {
      return absl::InvalidArgumentError(absl::StrCat("logit bias names token ", token, " twice"));
    }
    RETURN_IF_ERROR(ValidateLogitBias(bias));
  }
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  return absl::OkStatus();
}

RowSampling DrawRowSampling(const SamplingParams& params, Rng& rng) {
  RowSampling row;
  row.temperature = params.temperature;
  row.top_k = params.top_k;
  row.top_p = params.top_p;
  row.min_p = params.min_p;
  row.u = params.greedy() ? 0.0 : rng.NextUnit();
  return row;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng,
                    std::vector<std::pair<float, int32_t>>* scratch) {
  return SampleRow(logits, DrawRowSampling(params, rng), scratch);
}

}  // namespace kvtier
