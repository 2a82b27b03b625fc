// TierCache: one tier's slots and the prefix cache over them — the slots themselves
// (BlockPool: ids, reference counts, free queue), the index of the cached ones (content key
// -> slot and back), the eviction order of the cached slots nobody holds (LruSet, by
// priority), and, where the tier keeps them beside its bytes (device, host), each cached
// slot's token ids (the disk keeps them in its slot headers). One type for the device,
// host and disk tiers: the tier is a dimension, not a copy of the code. The bytes live with
// whoever owns the tier (the backend's pool, the host region, the disk file).
// A cached device block holds one reference of its own (the cache's), so "nobody holds it"
// means ref count 1 there; host and disk cached slots hold none but the cache entry.
// Invariant (VerifyIndex): the two maps are each other's inverse. Not thread-safe.
#ifndef KVTIER_KV_TIER_CACHE_H_
#define KVTIER_KV_TIER_CACHE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/lru_set.h"
#include "kv/tier.h"

namespace kvtier {

class TierCache {
 public:
  // `num_available` of the `num_blocks` slots usable at once (the rest join as they are
  // prepared, BlockPool::MakeAvailable); `block_tokens` > 0 keeps each slot's tokens.
  TierCache(Tier tier, int64_t num_blocks, int64_t num_available, int64_t block_tokens, bool keeps_tokens);

  Tier tier() const { return tier_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  LruSet& lru() { return lru_; }
  const LruSet& lru() const { return lru_; }
  int64_t num_blocks() const { return pool_.num_blocks(); }

  // The slot caching `hash`; nullopt when none does.
  std::optional<int32_t> Find(const BlockHash& hash) const {
    auto it = by_hash_.find(hash);
    if (it == by_hash_.end()) return std::nullopt;
    return it->second;
  }
  bool Contains(const BlockHash& hash) const { return by_hash_.contains(hash); }
  // The key a cached slot holds; nullptr when it caches nothing.
  const BlockHash* KeyOf(int32_t slot) const {
    auto it = hash_of_.find(slot);
    return it == hash_of_.end() ? nullptr : &it->second;
  }
  bool IsCached(int32_t slot) const { return hash_of_.contains(slot); }
  int64_t num_cached() const { return static_cast<int64_t>(hash_of_.size()); }
  // Every cached slot and its key (unordered).
  const absl::flat_hash_map<int32_t, BlockHash>& entries() const { return hash_of_; }

  // Enters `slot` as the cache entry of `hash`, with its tokens where the tier keeps them
  // (the LRU and the reference counts are the caller's).
  void Insert(int32_t slot, const BlockHash& hash, std::span<const int32_t> tokens = {});
  // The same, and the slot joins the LRU at `priority` (a host or disk slot nobody holds).
  void InsertEvictable(int32_t slot, const BlockHash& hash, int32_t priority, std::span<const int32_t> tokens = {}) {
    Insert(slot, hash, tokens);
    lru_.PushBack(slot, priority);
  }
  // Removes a cached slot's entry (nothing when it caches nothing; the LRU is the
  // caller's). Returns the key it held.
  std::optional<BlockHash> Erase(int32_t slot);
  // The slot caching `hash`, if in the LRU, becomes its most recently used.
  void Touch(const BlockHash& hash, int32_t priority);

  // The stored tokens of a slot (device, host; valid while it is cached).
  std::span<const int32_t> tokens(int32_t slot) const {
    return std::span<const int32_t>(tokens_).subspan(static_cast<size_t>(slot * block_tokens_),
                                                     static_cast<size_t>(block_tokens_));
  }
  void SetTokens(int32_t slot, std::span<const int32_t> tokens);
  // Whether the slot's stored tokens are exactly `tokens`.
  bool TokensMatch(int32_t slot, std::span<const int32_t> tokens) const;

  // The pool's invariant, the two maps inverse of each other, and stored tokens for every
  // slot where the tier keeps them.
  absl::Status VerifyIndex() const;

 private:
  const Tier tier_;
  const int64_t block_tokens_;
  const bool keeps_tokens_;
  BlockPool pool_;
  LruSet lru_;
  absl::flat_hash_map<BlockHash, int32_t> by_hash_;
  absl::flat_hash_map<int32_t, BlockHash> hash_of_;
  std::vector<int32_t> tokens_;  // (num_blocks, block_tokens) where kept; else empty
};

}  // namespace kvtier

#endif  // KVTIER_KV_TIER_CACHE_H_
