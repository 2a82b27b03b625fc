// BlockPool: the ids of one tier's fixed set of KV blocks, with reference counts and a free
// queue. Metadata only — the bytes live with whoever owns the tier (backend / host / disk).
// Not thread-safe: owned by the KV cache manager, which is driven under the engine's lock.
#ifndef KVTIER_KV_BLOCK_POOL_H_
#define KVTIER_KV_BLOCK_POOL_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace kvtier {

using BlockId = int32_t;

// A pool may start with only its first ids available and grow to num_blocks later
// (MakeAvailable): the host and disk tiers become usable a chunk at a time while their
// memory is pinned and their file reserved in the background. num_blocks is the budget
// from the start; the ids not available yet are neither free nor referenced.
// Invariant: every id in [0, num_available) is either in the free queue with ref count 0,
// or out of it with ref count >= 1; every id in [num_available, num_blocks) has ref count
// 0 and is not in the free queue. Allocation takes from the front, release appends to the
// back (FIFO), so a just-freed block is reused last — the prefix cache relies on that to
// keep recently used content alive longest.
class BlockPool {
 public:
  // Every block available at once.
  explicit BlockPool(int64_t num_blocks) : BlockPool(num_blocks, num_blocks) {}
  // The first num_available blocks available (clamped to [0, num_blocks]).
  BlockPool(int64_t num_blocks, int64_t num_available);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_available() const { return num_available_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_available_ - num_free(); }
  int64_t peak_used() const { return peak_used_; }

  // Makes ids [num_available, min(n, num_blocks)) available, appended to the free queue in
  // id order. Never shrinks the pool: n at or below num_available changes nothing.
  void MakeAvailable(int64_t n);

  // A free block with ref count 1, or nullopt when none is free.
  std::optional<BlockId> Allocate();
  // Takes a specific free block (recovering persisted state at start-up). False when the
  // block is not free.
  bool AllocateSpecific(BlockId id);
  void AddRef(BlockId id);
  // Drops one reference; the block returns to the free queue at 0. Returns true then.
  bool Release(BlockId id);
  int32_t ref_count(BlockId id) const { return ref_counts_[static_cast<size_t>(id)]; }

  // Checks the invariant above; Internal error describing the first violation.
  absl::Status VerifyIntegrity() const;

 private:
  std::vector<int32_t> ref_counts_;  // (num_blocks)
  std::deque<BlockId> free_;
  int64_t num_available_ = 0;
  int64_t peak_used_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_KV_BLOCK_POOL_H_
