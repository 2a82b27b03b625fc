// TokenHistory (token_history.h).
#include "engine/token_history.h"

namespace kvtier {

TokenHistory::TokenHistory(const SamplingParams& params, std::span<const int32_t> prompt)
    : params_(params),
      track_context_(params.repetition_penalty != 1.0f),
      track_generated_(params.has_penalties()),
      active_(params.has_penalties() || !params.logit_bias.empty()) {
  for (const auto& [token, bias] : params.logit_bias) At(token).bias = bias;
  if (!track_context_) return;
  for (int32_t token : prompt) At(token).repetition = params_.repetition_penalty;
}

TokenAdjustment& TokenHistory::At(int32_t token) {
  auto [it, inserted] = index_.try_emplace(token, static_cast<int32_t>(adjustments_.size()));
  if (inserted) {
    TokenAdjustment a;
    a.token = token;
    adjustments_.push_back(a);
    generated_.push_back(0);
  }
  return adjustments_[static_cast<size_t>(it->second)];
}

void TokenHistory::AddGenerated(int32_t token) {
  if (!track_generated_) return;
  TokenAdjustment& a = At(token);
  int32_t& count = generated_[static_cast<size_t>(index_.at(token))];
  ++count;
  if (track_context_) a.repetition = params_.repetition_penalty;
  a.subtract = PenaltySubtrahend(count, params_.frequency_penalty, params_.presence_penalty);
}

}  // namespace kvtier
