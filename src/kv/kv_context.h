// KvContext: what the KV cache manager and its tiers share — the options, the backend, the
// counters, each content key's eviction priority, the device tier's cache (the prefix
// index over the backend's pool, or with layer groups the groups' prefix entries) and the
// transfers in flight. The manager owns it; each tier below the device keeps a pointer.
// Not thread-safe: the stepping thread's.
#ifndef KVTIER_KV_KV_CONTEXT_H_
#define KVTIER_KV_KV_CONTEXT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kv/block_key_chain.h"
#include "kv/block_priorities.h"
#include "kv/grouped_block_tables.h"
#include "kv/kv_cache_options.h"
#include "kv/kv_counters.h"
#include "kv/tier_cache.h"
#include "kv/transfers.h"

namespace kvtier {

class Backend;

// A token sequence's full blocks and their keys, as a prefix walk reads them.
struct BlockChain {
  std::span<const int32_t> tokens;
  BlockKeyChain* keys;
  int64_t block_tokens;
  // A layer group's blocks (GroupBlockKey), or -1: blocks of every layer.
  int64_t group = -1;

  // By value: computing a later key may move the chain's earlier ones.
  BlockHash Key(int64_t i) const {
    const BlockHash& key = keys->Key(tokens, block_tokens, i);
    return group < 0 ? key : GroupBlockKey(key, group);
  }
  std::span<const int32_t> Tokens(int64_t i) const {
    return tokens.subspan(static_cast<size_t>(i * block_tokens), static_cast<size_t>(block_tokens));
  }
  // Full blocks a prefix may cover: always one token left to compute.
  int64_t max_blocks() const {
    return tokens.size() < 2 ? 0 : (static_cast<int64_t>(tokens.size()) - 1) / block_tokens;
  }
};

// What a device block caches: its key in the tiers below and its tokens (valid until the
// block's entry changes).
struct DeviceEntry {
  BlockHash key;
  std::span<const int32_t> tokens;
};

struct KvContext {
  KvContext(const KvCacheOptions& options, Backend* backend, size_t block_bytes)
      : options(options),
        backend(backend),
        block_bytes(block_bytes),
        device(Tier::kDevice, options.device_blocks, options.device_blocks, options.block_tokens, true),
        transfers(backend, &counters, block_bytes) {}

  // Removes a slot's entry from `cache`, forgetting its key's priority once no tier caches
  // the key any more.
  void Uncache(TierCache& cache, int32_t slot) {
    const std::optional<BlockHash> hash = cache.Erase(slot);
    if (!hash.has_value()) return;
    for (const TierCache* c : caches) {
      if (c != nullptr && c->Contains(*hash)) return;
    }
    priorities.Forget(*hash);
  }
  bool CachedAnywhere(const BlockHash& hash) const {
    for (const TierCache* c : caches) {
      if (c != nullptr && c->Contains(hash)) return true;
    }
    return false;
  }
  // What device block `block` caches now: the device cache's entry, or with layer groups
  // the group's prefix entry under its group's key (GroupBlockKey); nullopt when it caches
  // nothing. A write queued from a block asks this right before it copies the bytes: a
  // block evicted since and written for another key, group or prefix holds another key or
  // none, and is not copied.
  std::optional<DeviceEntry> DeviceEntryOf(BlockId block) const {
    if (grouped == nullptr) {
      const BlockHash* key = device.KeyOf(block);
      if (key == nullptr) return std::nullopt;
      return DeviceEntry{*key, device.tokens(block)};
    }
    const GroupedBlockTables::PrefixEntry* entry = grouped->EntryAt(block);
    if (entry == nullptr) return std::nullopt;
    return DeviceEntry{GroupBlockKey(entry->key, entry->group), entry->tokens};
  }
  // Whether the device caches block i of the chain (a group's chain: the group's entry).
  bool DeviceCaches(const BlockChain& chain, int64_t i) const {
    if (chain.group < 0) return device.Contains(chain.Key(i));
    return grouped != nullptr && grouped->CachesKey(chain.keys->Key(chain.tokens, chain.block_tokens, i), chain.group);
  }
  // Synchronous copies go behind the async ones on a copy engine: those land first, so the
  // host's wait for them is counted as a stall, not hidden inside a "synchronous" copy.
  void DrainCopies() { transfers.AwaitLane(Lane::kCopy); }

  const KvCacheOptions options;
  Backend* const backend;
  const size_t block_bytes;
  KvCacheCounters counters;
  BlockPriorities priorities;
  TierCache device;
  Transfers transfers;
  // Every tier's cache with slots (device, host, disk), set by the manager.
  std::array<const TierCache*, kNumSlotTiers> caches{};
  // With layer groups (KvCacheOptions::layer_groups): the manager's tables and the groups'
  // prefix entries, which then take the device cache's place; null otherwise.
  const GroupedBlockTables* grouped = nullptr;
};

}  // namespace kvtier

#endif  // KVTIER_KV_KV_CONTEXT_H_
