// The latency histograms a context keeps, with their fixed bucket layouts (upper bounds in
// seconds; every histogram also has the +Inf bucket). The layouts are part of the metrics
// contract (docs/METRICS.md): a dashboard's quantiles compare across versions only while
// they stay. Thread-compatible: the engine keeps them under its lock.
#ifndef KVTIER_ENGINE_LATENCY_HISTOGRAMS_H_
#define KVTIER_ENGINE_LATENCY_HISTOGRAMS_H_

#include "common/histogram.h"
#include "nlohmann/json.hpp"

namespace kvtier {

struct LatencyHistograms {
  // From the sequence's admission (kvt_sequence_add) to the step that produced its first
  // token: queueing, prefill and the first sample.
  Histogram time_to_first_token{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                0.75,  1,     2.5,  5,    7.5,  10,   20,   40,   80};
  // Between two consecutive tokens of one sequence (each step delivers its tokens at its
  // end, so this includes preemption and waits of that sequence).
  Histogram inter_token_latency{0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                0.075, 0.1,    0.15,  0.2,    0.3,  0.4,   0.5,  0.75,  1,    2.5,  5};
  // One kvt_step that ran a forward: scheduling, the forward, the commit.
  Histogram step_duration{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02,
                          0.03,   0.05,    0.075,  0.1,   0.25,   0.5,   1,      2.5,  5};

  // {"time_to_first_token_seconds": H, "inter_token_latency_seconds": H,
  //  "step_duration_seconds": H}, each H = {"bounds": [...], "cumulative_counts": [...]
  //  (one per bound), "count": n (the +Inf bucket), "sum": seconds}.
  nlohmann::json ToJson() const {
    auto one = [](const Histogram& h) {
      return nlohmann::json{{"bounds", h.bounds()}, {"cumulative_counts", h.CumulativeCounts()},
                            {"count", h.count()}, {"sum", h.sum()}};
    };
    return {{"time_to_first_token_seconds", one(time_to_first_token)},
            {"inter_token_latency_seconds", one(inter_token_latency)},
            {"step_duration_seconds", one(step_duration)}};
  }
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_LATENCY_HISTOGRAMS_H_
