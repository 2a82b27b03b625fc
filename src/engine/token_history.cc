// TokenHistory (token_history.h).
#include "engine/token_history.h"

namespace kvtier {

TokenHistory::TokenHistory(const SamplingParams& params, std::span<const int32_t> prompt)
    : params_(params), track_context_(params.has_penalties()),
      active_(track_context_ || !params.logit_bias.empty()) {
  for (const auto& [token, bias] : params.logit_bias) At(token).bias = bias;
  if (!track_context_) return;
  for (int32_t token : prompt) At(token).in_context = true;
}

TokenHistory::Entry& TokenHistory::At(int32_t token) {
  auto [it, inserted] = index_.try_emplace(token, static_cast<int32_t>(entries_.size()));
  if (inserted) entries_.push_back(Entry{token});
  return entries_[static_cast<size_t>(it->second)];
}

void TokenHistory::AddGenerated(int32_t token) {
  if (!track_context_) return;
  Entry& entry = At(token);
  entry.in_context = true;
  ++entry.generated;
}

void TokenHistory::AppendAdjustments(std::vector<TokenAdjustment>* out) const {
  for (const Entry& e : entries_) {
    TokenAdjustment a;
    a.token = e.token;
    a.bias = e.bias;
    a.repetition = e.in_context ? params_.repetition_penalty : 1.0f;
    a.subtract = PenaltySubtrahend(e.generated, params_.frequency_penalty, params_.presence_penalty);
    if (a.bias == 0.0f && a.repetition == 1.0f && a.subtract == 0.0f) continue;
    out->push_back(a);
  }
}

}  // namespace kvtier
