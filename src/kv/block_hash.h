// BlockHash: the identity (key) of a full KV block's content — SHA-256 chained over a
// scope digest, the parent block's key and the block's token ids. The scope
// (BlockKeyScope) covers everything else the block's K/V depend on: the model fingerprint,
// the KV layout and element format, and the request's cache namespace. So equal keys mean
// equal token prefixes of the same model, layout and namespace, and a crafted prompt cannot
// produce another prompt's key (SHA-256 is collision resistant; a 64-bit chain was not).
// Keys are stable across processes and hosts (the disk tier persists them). Value type;
// thread-safe.
#ifndef KVTIER_KV_BLOCK_HASH_H_
#define KVTIER_KV_BLOCK_HASH_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "backend/kv_layout.h"
#include "common/sha256.h"

namespace kvtier {

struct BlockHash {
  Sha256Digest digest;

  // The key of a block of `tokens` following `parent` (nullptr for a sequence's first
  // block) under `scope`.
  static BlockHash Chain(const BlockHash& scope, const BlockHash* parent, std::span<const int32_t> tokens);

  friend bool operator==(const BlockHash& a, const BlockHash& b) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.digest.Prefix64());  // already uniformly mixed
  }
};

// The key of layer group `group`'s part of the block keyed `key` (KvLayerGroups): a grouped
// context stores each group's block under its own key in the tiers below the device, and
// none of them equals a key of a block of every layer.
BlockHash GroupBlockKey(const BlockHash& key, int64_t group);

// Longest cache namespace accepted, in bytes.
inline constexpr size_t kMaxCacheNamespaceBytes = 256;

// The scope of the keys of one model, KV layout and format, and cache namespace ("" is the
// default namespace). Blocks of different scopes never share a key.
BlockHash BlockKeyScope(uint64_t model_fingerprint, const KvLayout& layout, std::string_view cache_namespace);

// InvalidArgument unless `ns` is valid UTF-8 without NUL and at most
// kMaxCacheNamespaceBytes long.
absl::Status ValidateCacheNamespace(std::string_view ns);

}  // namespace kvtier

#endif  // KVTIER_KV_BLOCK_HASH_H_
