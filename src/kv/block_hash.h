// BlockHash: the identity of a full KV block's content — a chained hash of (parent block's
// hash, the block's token ids, the model fingerprint), so equal hashes mean equal prefixes
// of equal models. Stable across processes and hosts (the disk tier persists it).
// Value type; thread-safe.
#ifndef KVTIER_KV_BLOCK_HASH_H_
#define KVTIER_KV_BLOCK_HASH_H_

#include <cstdint>
#include <optional>
#include <span>

#include "model/stable_hash.h"

namespace kvtier {

struct BlockHash {
  uint64_t value = 0;

  static BlockHash Chain(std::optional<BlockHash> parent, std::span<const int32_t> tokens,
                         uint64_t model_fingerprint) {
    uint64_t state = Fnv1a64(&model_fingerprint, sizeof model_fingerprint);
    const uint64_t parent_value = parent ? parent->value : 0;
    const uint8_t has_parent = parent ? 1 : 0;
    state = Fnv1a64(&has_parent, 1, state);
    state = Fnv1a64(&parent_value, sizeof parent_value, state);
    state = Fnv1a64(tokens.data(), tokens.size_bytes(), state);
    return BlockHash{SplitMix64(state)};
  }
  friend bool operator==(BlockHash a, BlockHash b) { return a.value == b.value; }
  template <typename H>
  friend H AbslHashValue(H h, BlockHash b) {
    return H::combine(std::move(h), b.value);
  }
};

}  // namespace kvtier

#endif  // KVTIER_KV_BLOCK_HASH_H_
