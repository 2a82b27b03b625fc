// Tier: where a KV block can be — the device's pool, the host region, the disk file, the
// remote tier (Redis, shared by a service's processes) — and the names the statistics use.
// Plain values.
#ifndef KVTIER_KV_TIER_H_
#define KVTIER_KV_TIER_H_

#include <cstdint>
#include <vector>

namespace kvtier {

using SequenceId = int64_t;
using Tokens = std::vector<int32_t>;

// In order, fastest first: a block is looked for in this order, and moves down it when
// evicted. The device, host and disk tiers hold slots of their own (TierCache); the remote
// tier holds blocks by key only.
enum class Tier { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
inline constexpr int kNumTiers = 4;
// The tiers of slots: device, host, disk.
inline constexpr int kNumSlotTiers = 3;
const char* TierName(Tier tier);

// One slot of a tier with slots.
struct SlotRef {
  Tier tier;
  int32_t slot;
};

}  // namespace kvtier

#endif  // KVTIER_KV_TIER_H_
