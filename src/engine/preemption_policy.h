// CostModelPolicy: swap or recompute, per preempted sequence, by measured cost — bytes
// over the measured copy bandwidth (out and back) against tokens times the measured
// compute time per token. The engine feeds it measurements after every step.
// Not thread-safe: used under the engine lock.
#ifndef KVTIER_ENGINE_PREEMPTION_POLICY_H_
#define KVTIER_ENGINE_PREEMPTION_POLICY_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "engine/engine_options.h"
#include "engine/scheduler.h"

namespace kvtier {

class CostModelPolicy final : public PreemptionPolicy {
 public:
  CostModelPolicy(PreemptionMode mode, int64_t block_bytes, bool can_swap)
      : mode_(mode), block_bytes_(block_bytes), can_swap_(can_swap) {}

  bool ShouldSwap(const Sequence& victim, int64_t blocks) const override {
    if (!can_swap_ || mode_ == PreemptionMode::kRecompute) return false;
    if (mode_ == PreemptionMode::kSwap) return true;
    const double swap_seconds = 2.0 * static_cast<double>(blocks * block_bytes_) / bytes_per_second_;
    const double recompute_seconds = static_cast<double>(victim.num_computed) * seconds_per_token_;
    return swap_seconds < recompute_seconds;
  }

  // What the engine measured. The swap side: exponential moving averages. The prefill time
  // per token (load plans) comes from steps of many tokens only (a decode step's time per
  // token says little about a prefill's), and is the lowest of the recent ones: a step's
  // time per token falls with its size and a context's first steps pay one-time costs
  // (kernels loaded, workspaces), so the lowest is nearest a long prompt's own; and an
  // estimate too low only makes a plan compute more, at worst the recompute's time, where
  // one too high loads blocks that land late. Its first measurement replaces the guess.
  void ObserveCompute(int64_t tokens, double seconds) {
    if (tokens > 0 && seconds > 0) seconds_per_token_ = 0.8 * seconds_per_token_ + 0.2 * (seconds / tokens);
    if (tokens >= kPrefillStepTokens && seconds > 0) {
      const double per_token = seconds / static_cast<double>(tokens);
      recent_prefill_[num_prefill_steps_++ % kRecentPrefillSteps] = per_token;
      const size_t n = std::min<size_t>(num_prefill_steps_, kRecentPrefillSteps);
      prefill_seconds_per_token_ = *std::min_element(recent_prefill_.begin(), recent_prefill_.begin() + n);
      latest_prefill_seconds_per_token_ = per_token;
    }
  }
  void ObserveCopyBandwidth(double bytes_per_second) override {
    if (bytes_per_second > 0) bytes_per_second_ = bytes_per_second;
  }
  double SecondsPerToken() const override { return prefill_seconds_per_token_; }
  double LatestSecondsPerToken() const override { return latest_prefill_seconds_per_token_; }

 private:
  PreemptionMode mode_;
  int64_t block_bytes_;
  bool can_swap_;
  // Starting guesses until measured: a host memcpy-class link and a small model's cost.
  double bytes_per_second_ = 10e9;
  double seconds_per_token_ = 1e-4;
  static constexpr int64_t kPrefillStepTokens = 128;
  double prefill_seconds_per_token_ = 1e-4;
  double latest_prefill_seconds_per_token_ = 1e-4;
  static constexpr size_t kRecentPrefillSteps = 16;
  std::array<double, kRecentPrefillSteps> recent_prefill_{};
  size_t num_prefill_steps_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_PREEMPTION_POLICY_H_
