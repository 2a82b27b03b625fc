// KvCacheOptions: the sizes and switches of a KV cache manager's tiers (kv_cache_manager.h).
// Plain value type.
#ifndef KVTIER_KV_KV_CACHE_OPTIONS_H_
#define KVTIER_KV_KV_CACHE_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "kv/kv_layer_groups.h"

#include "kv/remote_tier_options.h"
#include "kv/tier_preparation.h"

namespace kvtier {

class Clock;
class FileIo;

struct KvCacheOptions {
  int64_t block_tokens = 16;
  int64_t device_blocks = 0;
  int64_t host_blocks = 0;          // 0 disables the host tier
  int64_t disk_blocks = 0;          // 0 disables the disk tier
  std::string disk_path;            // file backing the disk tier
  FileIo* file_io = nullptr;        // nullptr = the real file system
  uint64_t model_fingerprint = 0;   // keys the prefix cache and the disk file
  bool prefix_cache = true;
  bool write_behind = true;         // with a disk tier: full blocks written to disk soon (disk_tier.h)
  // How long FinishStep(idle) may wait for the slow tiers' writes. 0 where the caller moves
  // what is left between steps itself (PumpIdleWrites, the engine's idle writer): then the
  // step that ends a request never waits for the disk or the remote tier.
  std::chrono::milliseconds idle_drain_budget{200};
  TierPreparationOptions preparation;  // host pinning and disk reservation in the background
  RemoteTierOptions remote;         // the remote tier (Redis), off when its url is empty
  // What the disk tier's read speed and its age are measured by; nullptr = the steady clock
  // (tests: a fake one, so that a read's time and a figure's age are exact).
  const Clock* clock = nullptr;
  // Layer groups with their own tables (kv_layer_groups.h; the backend's pool holds one
  // group's layers a block): a windowed group's blocks go back to the pool as they leave the
  // window. Unset: one block holds every layer. Swaps and forks move each group's kept
  // blocks; with prefix_cache each group's full blocks are prefix entries, kept in every
  // tier below under the group's key (GroupBlockKey; kv_cache_grouped_prefix.cc), split by
  // load plans and pinned as any; a long sequence's full-attention groups move their oldest
  // blocks to the host tier (kv_cache_streaming.cc).
  std::optional<KvLayerGroups> layer_groups;
};

}  // namespace kvtier

#endif  // KVTIER_KV_KV_CACHE_OPTIONS_H_
