// The remote tier's part of Engine::Stats ("remote"): what it stored and found, what it
// refused, and whether it is on. Called under the engine lock.
#ifndef KVTIER_ENGINE_REMOTE_TIER_STATS_H_
#define KVTIER_ENGINE_REMOTE_TIER_STATS_H_

#include "kv/kv_cache_manager.h"
#include "nlohmann/json.hpp"

namespace kvtier {

nlohmann::json RemoteTierStats(const KvCacheManager& kv);

}  // namespace kvtier

#endif  // KVTIER_ENGINE_REMOTE_TIER_STATS_H_
