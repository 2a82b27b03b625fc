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

absl::Status ValidateMinP(float min_p) {
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  return absl::OkStatus();
}

absl::Status ValidateRepetitionPenalty(float penalty) {
  if (!(penalty > 0.0f) || !std::isfinite(penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be finite and > 0, got ", penalty));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ValidatePenalty(float penalty, const char* name) {
  if (!(penalty >= -2.0f && penalty <= 2.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be in [-2, 2], got ", penalty));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePresencePenalty(float penalty) { return ValidatePenalty(penalty, "presence_penalty"); }

absl::Status ValidateFrequencyPenalty(float penalty) { return ValidatePenalty(penalty, "frequency_penalty"); }

absl::Status ValidateLogitBias(float bias) {
  if (!(bias >= -100.0f && bias <= 100.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("logit bias must be in [-100, 100], got ", bias));
  }
  return absl::OkStatus();
}

absl::Status ValidateTopLogprobs(int32_t top_n, const char* name) {
  if (top_n < -1 || top_n > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be in [-1, ", kMaxTopLogprobs, "] (-1 = off), got ", top_n));
  }
  return absl::OkStatus();
}

absl::Status ValidateNumCompletions(int32_t n) {
  if (n < 1 || n > kMaxCompletions) {
    return absl::InvalidArgumentError(absl::StrCat("n must be in [1, ", kMaxCompletions, "], got ", n));
  }
  return absl::OkStatus();
}

}  // namespace kvtier
