// The statistics of a context (Engine::Stats) in the Prometheus text exposition format
// (version 0.0.4), so a service serves them on its /metrics unchanged. Which statistic
// becomes which metric, with its type and help, is the table in prometheus_text.cc and
// docs/METRICS.md. Stateless; thread-safe.
#ifndef KVTIER_ENGINE_PROMETHEUS_TEXT_H_
#define KVTIER_ENGINE_PROMETHEUS_TEXT_H_

#include <string>

#include "nlohmann/json.hpp"

namespace kvtier {

// Renders stats (the JSON object Engine::Stats returns). A statistic missing from stats is
// left out; every metric family appears once, with its HELP and TYPE lines. Names are
// prefixed "kvtier_"; counters end in "_total".
std::string PrometheusText(const nlohmann::json& stats);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_PROMETHEUS_TEXT_H_
