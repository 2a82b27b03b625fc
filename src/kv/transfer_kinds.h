// The kinds of transfer in flight between the tiers (transfers.h), each a value saying
// what it moves and what landing it must do, and the lanes they run on. Plain values.
#ifndef KVTIER_KV_TRANSFER_KINDS_H_
#define KVTIER_KV_TRANSFER_KINDS_H_

#include <cstddef>
#include <cstdint>
#include <variant>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/tier.h"
#include "remote/remote_block_bytes.h"

namespace kvtier {

// ---- Device -> host memory copies (Backend::StartCopiesToHost), landed in batch order.

// A cached device block copied to a host slot ahead of its eviction (write-back), or at
// its eviction (`evicted`: the device copy is gone, so a failure drops it). The host slot
// is held, in no cache map, until landed; then it joins the host cache.
struct HostWriteBackCopy {
  BlockId block;
  int32_t host_slot;
  BlockHash hash;
  Tokens tokens;
  int32_t priority;  // the block's eviction priority then
  bool evicted;
};
// A swapped-out block copied to the slot its swap holds: a host slot, or a staging buffer
// (`staging` >= 0) on its way to the swap's disk slot.
struct SwapOutCopy {
  BlockId block;
  SequenceId seq;
  uint64_t generation;  // distinguishes swap-outs of the same sequence id
  size_t index;         // block index in the swap (its disk tag)
  SlotRef slot;
  int32_t staging;
};
// An evicted device block the host tier could not take, copied to a staging buffer on its
// way to `disk_slot` (held, in no cache map).
struct DemoteCopy {
  BlockId block;
  int32_t disk_slot;
  int32_t staging;
  BlockHash hash;
  Tokens tokens;
  int32_t priority;
};
// Write-behind: a cached device block copied to a write-behind buffer on its way to
// `disk_slot` (held, in no cache map); the device copy stays cached.
struct PersistCopy {
  BlockId block;
  int32_t disk_slot;
  int32_t buffer;
  BlockHash hash;
  Tokens tokens;
};

// ---- Disk writes (one writer thread, in order).

// A cached host block written to disk ahead of its eviction: its disk slot is held, in no
// cache map, until landed; its host slot stays cached and is not rewritten meanwhile.
struct WriteBackJob {
  int32_t disk_slot;
  int32_t host_slot;
  BlockHash hash;
};
// A swapped-out block written from its staging buffer: the disk slot belongs to the swap
// (or to the job, once the swap is released).
struct SwapWriteJob {
  SequenceId seq;
  uint64_t generation;
  size_t index;
  int32_t disk_slot;
  int32_t staging;
};
// An evicted device block written from its staging buffer; its disk slot is held, in no
// cache map, until landed.
struct DemoteWriteJob {
  int32_t disk_slot;
  int32_t staging;
  BlockHash hash;
  int32_t priority;  // the block's, raised again when it joins the disk cache
};
// A host victim written at its eviction; the eviction waits for it (AwaitResult).
struct EvictionWriteJob {};
// Write-behind's write of a PersistCopy's buffer; the disk slot is held, in no cache map,
// until landed.
struct PersistWriteJob {
  int32_t disk_slot;
  int32_t buffer;
  BlockHash hash;
};
// A cached disk block used again: its index record is renewed, so that a restart evicts it
// after the blocks written since. Holds nothing: should the slot be rewritten meanwhile,
// the writer runs the rewrite after it (FIFO), and the record of the rewrite wins.
struct RenewRecordJob {
  int32_t disk_slot;
};

// ---- Disk reads (the reader threads; reported in order).

// A prefix block read from disk into a held host slot ahead of its use; its disk slot stays
// cached but out of the disk LRU until landed.
struct PrefixReadJob {
  int32_t disk_slot;
  int32_t host_slot;
  BlockHash hash;
};
// A swapped block read from disk into a held host slot ahead of its swap-in.
struct SwapReadJob {
  int32_t disk_slot;
  int32_t host_slot;
  SequenceId seq;
  uint64_t generation;
  size_t index;
};
// A block read at its use into a staging buffer; the reader waits for it (AwaitResult).
struct StagedReadJob {};
// A slot read only to measure the disk's read speed; holds nothing.
struct SpeedProbeJob {};

// ---- The remote tier (RemoteBlockStore's lanes).

// A lookup of a prompt block, into a held host slot (`host_slot` >= 0: pinned, in place, in
// no cache map) or into bytes of its own (`bytes`, filled when it lands).
struct RemoteGet {
  BlockHash hash;
  int32_t host_slot;
  RemoteBlockBytes bytes;
};
// A batch of computed blocks staged in the put buffer: the buffer is busy until the put
// lane has encoded them.
struct RemotePutBatch {
  int64_t blocks;
};

using Transfer = std::variant<HostWriteBackCopy, SwapOutCopy, DemoteCopy, PersistCopy, WriteBackJob, SwapWriteJob,
                              DemoteWriteJob, EvictionWriteJob, PersistWriteJob, RenewRecordJob, PrefixReadJob,
                              SwapReadJob, StagedReadJob, SpeedProbeJob, RemoteGet, RemotePutBatch>;

// The lanes transfers run on; each finishes in submission order.
enum class Lane { kCopy = 0, kDiskWrite = 1, kDiskRead = 2, kRemoteGet = 3, kRemotePut = 4 };
inline constexpr int kNumLanes = 5;
// A set of lanes (bit i: Lane i).
using Lanes = uint32_t;
inline constexpr Lanes LaneBit(Lane lane) { return 1u << static_cast<int>(lane); }
inline constexpr Lanes kAllLanes = (1u << kNumLanes) - 1;
inline constexpr Lanes kDiskLanes = LaneBit(Lane::kDiskWrite) | LaneBit(Lane::kDiskRead);
// The lanes that bring blocks into host memory (read-ahead, lookups).
inline constexpr Lanes kReadLanes = LaneBit(Lane::kDiskRead) | LaneBit(Lane::kRemoteGet);

// A transfer's identity: its lane, its number there (a copy batch's number, a disk job's
// number, a remote get's) and, for the copies of one batch, its place in the batch.
struct TransferId {
  Lane lane = Lane::kCopy;
  int64_t seq = 0;
  int32_t part = 0;
  friend bool operator==(const TransferId& a, const TransferId& b) = default;
  friend bool operator<(const TransferId& a, const TransferId& b) {
    if (a.lane != b.lane) return a.lane < b.lane;
    if (a.seq != b.seq) return a.seq < b.seq;
    return a.part < b.part;
  }
  template <typename H>
  friend H AbslHashValue(H h, const TransferId& id) {
    return H::combine(std::move(h), id.lane, id.seq, id.part);
  }
};

}  // namespace kvtier

#endif  // KVTIER_KV_TRANSFER_KINDS_H_
