// KvCacheManager: the front end of KV memory. Owns each sequence's block table and the
// pools behind them; the scheduler asks it whether positions can be held and where their
// blocks are, and never walks a pool itself. Not thread-safe: driven under the engine lock.
#ifndef KVTIER_KV_KV_CACHE_MANAGER_H_
#define KVTIER_KV_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kv/block_pool.h"

namespace kvtier {

using SequenceId = int64_t;

class KvCacheManager {
 public:
  KvCacheManager(int64_t num_device_blocks, int64_t block_tokens);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t num_device_blocks() const { return device_pool_.num_blocks(); }
  int64_t num_free_device_blocks() const { return device_pool_.num_free(); }
  int64_t num_used_device_blocks() const { return device_pool_.num_used(); }
  int64_t peak_used_device_blocks() const { return device_pool_.peak_used(); }
  int64_t BlocksForTokens(int64_t num_tokens) const {
    return (num_tokens + block_tokens_ - 1) / block_tokens_;
  }

  // Device blocks the sequence must still get to hold positions [0, num_tokens).
  int64_t NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const;
  // Grows the sequence's block table to cover [0, num_tokens). All or nothing:
  // ResourceExhausted (and no change) when the device tier has too few free blocks.
  absl::Status Reserve(SequenceId seq, int64_t num_tokens);
  // Returns all the sequence's blocks (no-op for an unknown sequence).
  void Release(SequenceId seq);
  // The sequence's device block ids, entry j covering positions [j*B, (j+1)*B).
  std::span<const BlockId> BlockTable(SequenceId seq) const;

  // Pool invariants plus: every referenced block is referenced by exactly the tables that
  // hold it.
  absl::Status VerifyIntegrity() const;

 private:
  int64_t block_tokens_;
  BlockPool device_pool_;
  absl::flat_hash_map<SequenceId, std::vector<BlockId>> tables_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_KV_CACHE_MANAGER_H_
