// BlockPriorities: each cached content key's eviction priority — the highest priority of
// the sequences that computed or reused the block — kept only for keys some tier caches
// (a key no tier caches any more is forgotten). Not thread-safe.
#ifndef KVTIER_KV_BLOCK_PRIORITIES_H_
#define KVTIER_KV_BLOCK_PRIORITIES_H_

#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "kv/block_hash.h"

namespace kvtier {

class BlockPriorities {
 public:
  // 0 when never raised.
  int32_t Of(const BlockHash& hash) const {
    auto it = priority_.find(hash);
    return it == priority_.end() ? 0 : it->second;
  }
  void Raise(const BlockHash& hash, int32_t priority) {
    if (priority == 0 && !priority_.contains(hash)) return;
    int32_t& p = priority_[hash];
    p = std::max(p, priority);
  }
  void Forget(const BlockHash& hash) { priority_.erase(hash); }

 private:
  absl::flat_hash_map<BlockHash, int32_t> priority_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_BLOCK_PRIORITIES_H_
