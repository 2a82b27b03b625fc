// Implementation of SampleToken and SamplingParams::Validate.
#include "engine/sampler.h"

#include "absl/strings/str_cat.h"
#include "backend/sampling_ranges.h"
#include "common/status_macros.h"

namespace kvtier {

absl::Status SamplingParams::Validate() const {
  RETURN_IF_ERROR(ValidateTemperature(temperature));
  RETURN_IF_ERROR(ValidateTopK(top_k));
  RETURN_IF_ERROR(ValidateTopP(top_p));
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
  row.u = params.greedy() ? 0.0 : rng.NextUnit();
  return row;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng,
                    std::vector<std::pair<float, int32_t>>* scratch) {
  return SampleRow(logits, DrawRowSampling(params, rng), scratch);
}

}  // namespace kvtier
