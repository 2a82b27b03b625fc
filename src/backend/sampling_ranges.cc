// The sampling parameter ranges (sampling_ranges.h).
#include "backend/sampling_ranges.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status ValidateTemperature(float temperature) {
  // Written so that NaN fails: every comparison with it is false.
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0, got ", temperature));
  }
  return absl::OkStatus();
}

absl::Status ValidateTopK(int32_t top_k) {
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  return absl::OkStatus();
}

absl::Status ValidateTopP(float top_p) {
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  return absl::OkStatus();
}

}  // namespace kvtier
