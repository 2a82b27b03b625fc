// Implementation of SampleToken and SamplingParams::Validate.
#include "engine/sampler.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be a finite number >= 0, got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
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
  row.u = params.greedy() ? 0.0 : rng.NextUnit();
  return row;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng,
                    std::vector<std::pair<float, int32_t>>* scratch) {
  return SampleRow(logits, DrawRowSampling(params, rng), scratch);
}

}  // namespace kvtier
