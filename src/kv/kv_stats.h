// KvStats: a snapshot of what the KV cache manager's statistics report — per tier with
// slots its capacity, use and preparation, the counters, the disk store's and the remote
// store's own counters, and the writes still on their way to the slow tiers. Value type.
#ifndef KVTIER_KV_KV_STATS_H_
#define KVTIER_KV_KV_STATS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kv/grouped_block_tables.h"
#include "kv/kv_counters.h"
#include "kv/tier.h"
#include "remote/remote_block_store.h"
#include "storage/disk_block_store.h"

namespace kvtier {

struct KvTierStats {
  int64_t capacity_blocks = 0;
  // Blocks held by sequences (running, or swapped out); cached blocks nobody holds are
  // reclaimable and counted by cached_blocks instead.
  int64_t used_blocks = 0;
  int64_t cached_blocks = 0;
  int64_t peak_blocks = 0;
  // Slots usable now (prepared and admitted): capacity_blocks once prepared.
  int64_t ready_blocks = 0;
  // Why the tier's preparation stopped early ("" when it did not).
  std::string preparation_error;
};

struct KvStats {
  size_t block_bytes = 0;
  KvTierStats tiers[kNumSlotTiers];  // by Tier: device, host, disk
  KvCacheCounters counters;
  int64_t pinned_blocks = 0;
  // The disk store's own counters (index recovery, journal), zero without a disk tier; and
  // why part of its index was ignored when it was opened ("" when none was).
  DiskBlockStore::Counters disk_store;
  std::string disk_index_ignored_reason;
  // The disk's recent read speed, the one load plans weigh (DiskTier::SecondsPerBlock: the
  // guess before any read); 0 without a disk tier.
  double disk_read_bytes_per_second = 0;
  bool remote_enabled = false;
  RemoteBlockStore::Counters remote;  // the remote store's own (with remote_enabled)
  // Blocks on their way to the slow tiers, not there yet: the disk's (write-behind queued,
  // being copied off the device, or written by the writer thread and not finished) and the
  // remote tier's (queued here, or put by its lane and not answered). Zero once a context
  // that served is idle and its writes have landed.
  int64_t pending_disk_writes = 0;
  int64_t pending_remote_writes = 0;
  // With layer groups (KvCacheOptions::layer_groups): the blocks each group's tables hold,
  // what every layer kept would hold, and the blocks returned for leaving a window; empty
  // group_blocks with one group (the device tier's numbers say it all).
  GroupedBlockStats layer_groups;

  const KvTierStats& tier(Tier t) const { return tiers[static_cast<int>(t)]; }
};

// Measured bytes/second of the tier moves the counters timed (the preemption cost model's
// swap bandwidth); 0 before any.
inline double MeasuredSwapBandwidth(const KvCacheCounters& c) {
  return c.copy_seconds > 0 ? static_cast<double>(c.swap_bytes_timed) / c.copy_seconds : 0.0;
}

}  // namespace kvtier

#endif  // KVTIER_KV_KV_STATS_H_
