// The sampler chain's host reference (sampler_chain.h). Compiled with -ffp-contract=off:
// AdjustLogit must round after every operation, as the device does.
#include "backend/sampler_chain.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backend/sampling_ranges.h"

namespace kvtier {

float AdjustLogit(float logit, const TokenAdjustment& a) {
  float l = logit + a.bias;
  if (a.repetition != 1.0f) l = l > 0.0f ? l / a.repetition : l * a.repetition;
  return l - a.subtract;
}

float PenaltySubtrahend(int32_t count, float frequency_penalty, float presence_penalty) {
  if (count <= 0) return 0.0f;
  return static_cast<float>(count) * frequency_penalty + presence_penalty;
}

void ApplyAdjustments(std::span<float> logits, std::span<const TokenAdjustment> adjustments) {
  // Step 1, structured output's allowed-token mask (masked logits = -inf), belongs here,
  // before the loop below.
  for (const TokenAdjustment& a : adjustments) {
    float& logit = logits[static_cast<size_t>(a.token)];
    logit = AdjustLogit(logit, a);
  }
}

absl::Status ValidateSamplingBatch(const SamplingBatch& batch, size_t logit_rows, int64_t vocab) {
  auto bad_row = [&](int32_t row) { return row < 0 || static_cast<size_t>(row) >= logit_rows; };
  auto bad_token = [&](int32_t token) { return token < 0 || token >= vocab; };
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const SampleSpec& s = batch.samples[i];
    if (bad_row(s.logits_row)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", i, " reads logits row ", s.logits_row, " of ", logit_rows));
    }
    if (absl::Status st = ValidateOneRowSampling(s.sampling, absl::StrCat("sample ", i)); !st.ok()) return st;
    if (absl::Status st = ValidateTopLogprobs(s.top_logprobs, "top_logprobs"); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sample ", i, ": ", st.message()));
    }
  }
  for (size_t i = 0; i < batch.scores.size(); ++i) {
    const ScoreSpec& s = batch.scores[i];
    if (bad_row(s.logits_row) || bad_token(s.target) || s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat("score ", i, ": row ", s.logits_row, " of ", logit_rows,
                                                     ", target ", s.target, " of vocabulary ", vocab,
                                                     ", top_logprobs ", s.top_logprobs));
    }
  }
  if (batch.row_adjustments.empty()) {
    if (!batch.adjustments.empty()) return absl::InvalidArgumentError("adjustments without row ranges");
    return absl::OkStatus();
  }
  if (batch.row_adjustments.size() != logit_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(batch.row_adjustments.size(), " adjustment ranges for ", logit_rows, " logits rows"));
  }
  // Each token once per row: a bit per vocabulary entry, set for the row, then cleared.
  std::vector<uint64_t> seen(static_cast<size_t>((vocab + 63) / 64), 0);
  auto first_time = [&](int32_t token) {
    uint64_t& word = seen[static_cast<size_t>(token) / 64];
    const uint64_t bit = uint64_t{1} << (token % 64);
    const bool fresh = (word & bit) == 0;
    word |= bit;
    return fresh;
  };
  for (size_t r = 0; r < logit_rows; ++r) {
    const AdjustmentRange range = batch.row_adjustments[r];
    if (range.begin < 0 || range.count < 0 ||
        static_cast<size_t>(range.begin) + static_cast<size_t>(range.count) > batch.adjustments.size()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": adjustments [", range.begin, ", +", range.count,
                                                     ") outside the ", batch.adjustments.size(), " given"));
    }
    const std::span<const TokenAdjustment> row(batch.adjustments.data() + range.begin, static_cast<size_t>(range.count));
    for (const TokenAdjustment& a : row) {
      if (bad_token(a.token) || !first_time(a.token) || !std::isfinite(a.bias) ||
          !std::isfinite(a.subtract) || !(a.repetition > 0.0f) || !std::isfinite(a.repetition)) {
        return absl::InvalidArgumentError(absl::StrCat("row ", r, ": adjustment of token ", a.token,
                                                       " is invalid or repeated (bias ", a.bias, ", repetition ",
                                                       a.repetition, ", subtract ", a.subtract, ")"));
      }
    }
    for (const TokenAdjustment& a : row) seen[static_cast<size_t>(a.token) / 64] = 0;
  }
  return absl::OkStatus();
}

void SampleOnHost(std::span<float> logits, int64_t vocab, const SamplingBatch& batch, SamplingResult* result) {
  result->Clear();
  const size_t v = static_cast<size_t>(vocab);
  auto row_of = [&](int32_t r) { return logits.subspan(static_cast<size_t>(r) * v, v); };
  std::vector<int32_t> order_scratch;
  for (const ScoreSpec& s : batch.scores) {
    const std::span<const float> row = row_of(s.logits_row);
    const double lse = LogSumExp(row);
    LogprobEntry entry{s.target, LogprobOf(row, s.target, lse), static_cast<int32_t>(result->top.size()), 0};
    AppendTopLogprobs(row, lse, s.top_logprobs, &result->top, &order_scratch);
    entry.top_count = static_cast<int32_t>(result->top.size()) - entry.top_begin;
    result->scores.push_back(entry);
  }
  // Rows in order of first use; each row's samples after its adjustments, which are
  // applied once however many samples read it.
  const size_t num_rows = logits.size() / v;
  std::vector<std::vector<size_t>> samples_of(num_rows);
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    samples_of[static_cast<size_t>(batch.samples[i].logits_row)].push_back(i);
  }
  result->tokens.assign(batch.samples.size(), 0);
  result->sample_logprobs.assign(batch.samples.size(), LogprobEntry{});
  std::vector<float> raw;
  std::vector<std::pair<float, int32_t>> scratch;
  for (size_t r = 0; r < num_rows; ++r) {
    if (samples_of[r].empty()) continue;
    const std::span<float> row = row_of(static_cast<int32_t>(r));
    int32_t top_n = -1;
    for (size_t i : samples_of[r]) top_n = std::max(top_n, batch.samples[i].top_logprobs);
    const AdjustmentRange range = batch.row_adjustments.empty() ? AdjustmentRange{} : batch.row_adjustments[r];
    double lse = 0;
    int32_t top_begin = 0;
    if (top_n >= 0) {  // step 0, on the raw row (kept aside when the adjustments change it)
      lse = LogSumExp(row);
      top_begin = static_cast<int32_t>(result->top.size());
      AppendTopLogprobs(row, lse, top_n, &result->top, &order_scratch);
      if (range.count > 0) raw.assign(row.begin(), row.end());
    }
    ApplyAdjustments(row, std::span<const TokenAdjustment>(batch.adjustments)
                              .subspan(static_cast<size_t>(range.begin), static_cast<size_t>(range.count)));
    for (size_t i : samples_of[r]) {
      const SampleSpec& s = batch.samples[i];
      const int32_t token = SampleRow(row, s.sampling, &scratch);
      result->tokens[i] = token;
      if (s.top_logprobs < 0) continue;
      const std::span<const float> raw_row = range.count > 0 ? std::span<const float>(raw) : row;
      const int32_t available = static_cast<int32_t>(result->top.size()) - top_begin;
      result->sample_logprobs[i] = {token, LogprobOf(raw_row, token, lse), top_begin,
                                    std::min(s.top_logprobs, available)};
    }
  }
}

}  // namespace kvtier
