// The remote tier's part of Engine::Stats ("remote"): what it stored and found, what it
// refused, and whether it is on. Called under the engine lock.
#ifndef KVTIER_ENGINE_REMOTE_TIER_STATS_H_
#define KVTIER_ENGINE_REMOTE_TIER_STATS_H_

#include "kv/kv_stats.h"
#include "nlohmann/json.hpp"

namespace kvtier {

nlohmann::json RemoteTierStats(const KvStats& kv);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_REMOTE_TIER_STATS_H_
