// KvCacheManager: the front end of KV memory over three tiers — device (the backend's
// pool), host (one region from the backend, pinned on CUDA) and disk (a file of slots).
// It owns every sequence's block table, the prefix cache (full blocks keyed by chained
// hash, in any tier) and the swapped-out blocks of paused sequences. The scheduler asks it
// "can these positions be held", "match this prompt", "swap this one out"; it never walks
// a pool itself. Moves between tiers are whole-block copies through the backend.
// Not thread-safe: driven under the engine lock by the stepping thread.
#ifndef KVTIER_KV_KV_CACHE_MANAGER_H_
#define KVTIER_KV_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/lru_set.h"

namespace kvtier {

class Backend;
class DiskBlockStore;
class FileIo;

using SequenceId = int64_t;

enum class Tier { kDevice = 0, kHost = 1, kDisk = 2 };
inline constexpr int kNumTiers = 3;
const char* TierName(Tier tier);

struct KvCacheOptions {
  int64_t block_tokens = 16;
  int64_t device_blocks = 0;
  int64_t host_blocks = 0;          // 0 disables the host tier
  int64_t disk_blocks = 0;          // 0 disables the disk tier
  std::string disk_path;            // file backing the disk tier
  FileIo* file_io = nullptr;        // nullptr = the real file system
  uint64_t model_fingerprint = 0;   // keys the prefix cache and the disk file
  bool prefix_cache = true;
};

// Counters the statistics report; monotonically increasing except *_used.
struct KvCacheCounters {
  int64_t swaps_out = 0;            // sequences swapped out
  int64_t swaps_in = 0;
  int64_t prefetches = 0;           // swap-ins started a step ahead of use
  int64_t swap_out_bytes = 0;
  int64_t swap_in_bytes = 0;
  int64_t blocks_demoted[kNumTiers] = {0, 0, 0};  // cached blocks moved down from the tier
  int64_t blocks_dropped = 0;       // cached blocks evicted from the last tier
  int64_t prefix_hits[kNumTiers] = {0, 0, 0};     // blocks reused from each tier
  int64_t prefix_hit_tokens = 0;
  int64_t corrupt_blocks_detected = 0;
  int64_t io_errors = 0;
  double copy_seconds = 0;          // time spent moving blocks between tiers
};

class KvCacheManager {
 public:
  // Allocates the host region (through the backend) and opens the disk store, recovering
  // its persisted prefix blocks. `backend` must outlive the manager and have its device
  // pool allocated with options.device_blocks blocks.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(const KvCacheOptions& options, Backend* backend);
  ~KvCacheManager();  // flushes cached blocks to disk when the disk tier is on

  int64_t block_tokens() const { return options_.block_tokens; }
  int64_t BlocksForTokens(int64_t num_tokens) const {
    return (num_tokens + options_.block_tokens - 1) / options_.block_tokens;
  }
  int64_t num_device_blocks() const { return device_.num_blocks(); }
  // Free device blocks plus unreferenced cached ones (which can be evicted on demand).
  int64_t num_available_device_blocks() const { return device_.num_free() + device_lru_.size(); }
  // Blocks that any tier can hold at once (admission: a sequence beyond this never fits).
  int64_t total_blocks() const { return device_.num_blocks() + host_.num_blocks() + disk_.num_blocks(); }

  // Device blocks the sequence must still get to hold positions [0, num_tokens).
  int64_t NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const;
  // Grows the sequence's device block table to cover [0, num_tokens), evicting unreferenced
  // cached blocks (demoted down the tiers) as needed. All or nothing: ResourceExhausted.
  absl::Status Reserve(SequenceId seq, int64_t num_tokens);
  // Returns the sequence's device blocks and any swapped-out copies. Hashed full blocks
  // stay behind as prefix-cache entries.
  void Release(SequenceId seq);
  std::span<const BlockId> BlockTable(SequenceId seq) const;

  // Prefix reuse for a sequence with no blocks yet: maps the longest run of its full
  // blocks found in any tier (device hits shared, host/disk hits copied up) and returns the
  // number of tokens covered. Always leaves at least one token to compute. Never evicts a
  // referenced block; stops at the first miss, corrupt block or shortage.
  // `priority` (the sequence's) raises the eviction priority of the blocks it reuses.
  int64_t MatchPrefix(SequenceId seq, std::span<const int32_t> tokens, int32_t priority = 0);
  // Records that positions [0, num_computed) of the sequence hold valid K/V, so its newly
  // completed blocks become prefix-cache entries, evicted after those of lower priority.
  void OnComputed(SequenceId seq, std::span<const int32_t> tokens, int64_t num_computed, int32_t priority = 0);

  // Pins the sequence's first `num_blocks` full blocks (which must be computed): the cache
  // keeps them on the device tier, never evicted, until UnpinAll. Idempotent per block.
  void PinPrefix(SequenceId seq, int64_t num_blocks);
  void UnpinAll();
  int64_t num_pinned_blocks() const { return static_cast<int64_t>(pinned_.size()); }

  // Swap: moves every device block of the sequence to host slots (disk slots when host is
  // full). ResourceExhausted when neither tier has room (the caller recomputes instead);
  // IoError when a disk write fails (nothing is lost: the device blocks are kept).
  absl::Status SwapOut(SequenceId seq);
  bool IsSwappedOut(SequenceId seq) const { return swapped_.contains(seq); }
  int64_t SwappedBlocks(SequenceId seq) const;
  // Brings a swapped-out sequence back to device blocks. ResourceExhausted when too few
  // device blocks; DataLoss/IoError when a disk copy is corrupt or unreadable — the swapped
  // copy is then discarded and the caller must recompute the sequence from scratch.
  // With `prefetch`, host copies are only started (Backend::PrefetchBlocksFromHost): the
  // blocks may be read from the next step on, after Backend::WaitForPrefetches.
  absl::Status SwapIn(SequenceId seq, bool prefetch = false);

  // Writes the disk tier's index (write-new-then-rename) if it changed since the last call.
  void PersistIndexIfDirty();

  // Bytes per block; used/peak blocks per tier.
  size_t block_bytes() const { return block_bytes_; }
  int64_t capacity_blocks(Tier tier) const;
  // Blocks held by sequences (running, or swapped out); cached blocks nobody holds are
  // reclaimable and counted by cached_blocks instead.
  int64_t used_blocks(Tier tier) const;
  int64_t cached_blocks(Tier tier) const;
  int64_t peak_blocks(Tier tier) const;
  const KvCacheCounters& counters() const { return counters_; }
  // Measured bytes/second of swaps (for the preemption cost model); 0 before any swap.
  double measured_swap_bandwidth() const;

  // Every invariant: pools, tables, cache maps and LRU sets agree. Internal error naming
  // the first violation.
  absl::Status VerifyIntegrity() const;

 private:
  struct SlotRef {
    Tier tier;
    int32_t slot;
  };
  struct SequenceBlocks {
    std::vector<BlockId> table;         // device blocks, in position order
    std::vector<BlockHash> hashes;      // hashes of the first hashes.size() full blocks
  };
  // One cache tier's hash index: hash -> slot, slot -> hash, LRU of evictable slots.
  struct TierCache {
    absl::flat_hash_map<BlockHash, int32_t> by_hash;
    absl::flat_hash_map<int32_t, BlockHash> hash_of;
  };

  KvCacheManager(const KvCacheOptions& options, Backend* backend);
  // Eviction priority of a cached content hash (0 when never raised).
  int32_t PriorityOf(BlockHash hash) const;
  void RaisePriority(BlockHash hash, int32_t priority);

  // A free device block, evicting the LRU unreferenced cached block if needed.
  std::optional<BlockId> AllocateDevice();
  // A free slot in host (or disk) for cached or swapped data, evicting LRU cached entries
  // (host ones demoted to disk). Pinned blocks are never candidates: the pin holds a
  // reference, so they are not in any LRU set.
  std::optional<int32_t> AllocateHost();
  std::optional<int32_t> AllocateDisk();
  // Moves the content of a cached block being evicted from `tier` one tier down.
  void Demote(Tier tier, int32_t slot, BlockHash hash);
  void DropCached(Tier tier, int32_t slot);
  absl::Status CopyDeviceToHostSlot(BlockId block, int32_t host_slot);
  absl::Status CopyHostSlotToDevice(int32_t host_slot, BlockId block);
  absl::Status CopyDeviceToDisk(BlockId block, int32_t disk_slot, uint64_t tag);
  absl::Status CopyDiskToDevice(int32_t disk_slot, uint64_t tag, BlockId block);
  uint8_t* HostSlot(int32_t slot) const { return host_memory_ + static_cast<size_t>(slot) * block_bytes_; }
  TierCache& cache(Tier tier) { return caches_[static_cast<int>(tier)]; }
  const TierCache& cache(Tier tier) const { return caches_[static_cast<int>(tier)]; }

  const KvCacheOptions options_;
  Backend* const backend_;
  size_t block_bytes_ = 0;
  BlockPool device_;
  BlockPool host_;
  BlockPool disk_;
  uint8_t* host_memory_ = nullptr;      // (host_blocks, block_bytes) from the backend
  std::vector<uint8_t> staging_;        // one block, for disk <-> device moves
  std::unique_ptr<DiskBlockStore> disk_store_;
  bool disk_index_dirty_ = false;

  absl::flat_hash_map<SequenceId, SequenceBlocks> sequences_;
  absl::flat_hash_map<SequenceId, std::vector<SlotRef>> swapped_;
  TierCache caches_[kNumTiers];
  absl::flat_hash_map<BlockHash, int32_t> hash_priority_;  // only hashes cached somewhere
  // Unreferenced cached blocks per tier, LRU first. A cached device block holds one
  // reference of its own (the cache's), so "unreferenced" means ref count 1 there.
  LruSet device_lru_;
  // Pinned prefix blocks: hash -> device block, each holding one reference of the pin.
  absl::flat_hash_map<BlockHash, BlockId> pinned_;
  LruSet host_lru_;
  LruSet disk_lru_;
  KvCacheCounters counters_;
  int64_t swap_bytes_timed_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_KV_KV_CACHE_MANAGER_H_
