// DiskJobs: the disk tier's I/O in flight — its two DiskIoThreads (a writer of one thread
// and a reader of kReaderThreads, so reads never queue behind writes) and one registry of
// the jobs submitted to them, each job one value of DiskJob saying what it moves and what
// landing it must do. The reverse
// indexes the KV manager asks by ("is this disk slot being written?", "is this block being
// read ahead?") are kept here, in step with the registry, so no caller keeps its own.
// A job is registered when submitted and leaves the registry when TakeFinished hands it
// out (landing). Jobs whose submitter waits for the result itself (eviction writes, staged
// reads) keep their status here until TakeResult.
// Not thread-safe: one thread (the KV manager's stepping thread) submits, lands and waits;
// the I/O threads only run jobs (see DiskIoThread).
#ifndef KVTIER_KV_DISK_JOBS_H_
#define KVTIER_KV_DISK_JOBS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kv/block_hash.h"
#include "kv/disk_io_thread.h"

namespace kvtier {

using SequenceId = int64_t;

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
// An evicted device block the host tier could not take, written from its staging buffer;
// its disk slot is held, in no cache map, until landed.
struct DemoteWriteJob {
  int32_t disk_slot;
  int32_t staging;
  BlockHash hash;
  int32_t priority;  // the block's, raised again when it joins the disk cache
};
// A host victim written at its eviction; the eviction waits for it (TakeResult).
struct EvictionWriteJob {};
// Write-behind: a cached device block written to disk soon after it became full (so that
// it survives a crash), from a write-behind staging buffer; its disk slot is held, in no
// cache map, until landed. The device copy stays cached meanwhile.
struct PersistWriteJob {
  int32_t disk_slot;
  int32_t staging;  // in the write-behind buffers
  BlockHash hash;
};
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
// A block read at its use into a staging buffer; the reader waits for it (TakeResult).
struct StagedReadJob {};
// A slot read only to measure the disk's read speed (DiskBlockStore::ProbeRead); holds
// nothing (a slot rewritten meanwhile is read all the same: its bytes are not used).
struct SpeedProbeJob {};

// A cached disk block used again (recomputed or hit): its index record is renewed, so that
// a restart evicts it after the blocks written since. Holds nothing: should the slot be
// rewritten meanwhile, the writer runs the rewrite after it (FIFO), and the record of the
// rewrite wins.
struct RenewRecordJob {
  int32_t disk_slot;
};

using DiskJob = std::variant<WriteBackJob, SwapWriteJob, DemoteWriteJob, EvictionWriteJob, PersistWriteJob,
                             RenewRecordJob, PrefixReadJob, SwapReadJob, StagedReadJob, SpeedProbeJob>;

// Which I/O thread(s) an operation concerns.
enum class DiskThreads { kWriter, kReader, kBoth };

// A job's identity: which thread runs it and its number there (threads number from 1).
struct DiskJobId {
  bool read = false;
  int64_t seq = 0;
  friend bool operator==(DiskJobId a, DiskJobId b) { return a.read == b.read && a.seq == b.seq; }
  template <typename H>
  friend H AbslHashValue(H h, DiskJobId id) {
    return H::combine(std::move(h), id.read, id.seq);
  }
};

class DiskJobs {
 public:
  struct Landed {
    DiskJobId id;
    DiskJob job;
    absl::Status status;  // the Write's or Read's result
  };

  // Reads in flight at once: an NVMe drive delivers several times one thread's sequential
  // preads of whole blocks only with several in flight (2 MiB blocks of an 8B model).
  static constexpr int kReaderThreads = 8;

  // `store` must outlive this. Starts the writer's and the reader's I/O threads.
  explicit DiskJobs(DiskBlockStore* store);
  // Stops the reader, then the writer (each runs what is queued first).
  ~DiskJobs();

  // Writes `data` with its key and tokens into disk_slot; a SwapWriteJob's content is
  // private to the swap, every other kind's is cached (recorded in the disk index); a
  // RenewRecordJob writes no data (nullptr, no tokens), only the record.
  DiskJobId SubmitWrite(DiskJob job, int32_t disk_slot, const Sha256Digest& key, std::span<const int32_t> tokens,
                        const void* data);
  // Reads disk_slot into dest if it holds `key` with `tokens` (DiskBlockStore::Read).
  DiskJobId SubmitRead(DiskJob job, int32_t disk_slot, const Sha256Digest& key, std::span<const int32_t> tokens,
                       void* dest);

  // Reads disk_slot only to measure the read speed (a SpeedProbeJob).
  DiskJobId SubmitProbe(int32_t disk_slot);

  // Finished jobs of `which` thread(s), each thread's in submission order, out of the
  // registry and its indexes (an awaited job's status stays for TakeResult). Never blocks
  // on I/O.
  std::vector<Landed> TakeFinished(DiskThreads which = DiskThreads::kBoth);
  // Blocks until the job (and every earlier one of its thread) has finished; TakeFinished
  // then reports it.
  void Wait(DiskJobId id);
  // Registered and not yet handed out by TakeFinished.
  bool InFlight(DiskJobId id) const { return jobs_.contains(id); }
  // The status of an eviction write or staged read once landed (and forgets it).
  std::optional<absl::Status> TakeResult(DiskJobId id);

  // The newest job of each thread (nullopt when none was ever submitted).
  std::optional<DiskJobId> last_write() const;
  std::optional<DiskJobId> last_read() const;
  int64_t num_writes_in_flight() const { return num_in_flight_[0]; }
  // Writes the writer thread has not finished (landed or not: finished ones wait for
  // TakeFinished, these for the disk).
  int64_t num_writes_unfinished() const { return writer_->num_unfinished(); }
  int64_t num_reads_in_flight() const { return num_in_flight_[1]; }

  // Reverse indexes (nullopt: none in flight).
  std::optional<DiskJobId> SwapWriteOnSlot(int32_t disk_slot) const { return Find(swap_write_by_slot_, disk_slot); }
  std::optional<DiskJobId> ReadOnSlot(int32_t disk_slot) const { return Find(read_by_slot_, disk_slot); }
  std::optional<DiskJobId> DemoteWriteOf(BlockHash hash) const { return Find(demote_write_by_hash_, hash); }
  std::optional<DiskJobId> PersistWriteOf(BlockHash hash) const { return Find(persist_write_by_hash_, hash); }
  std::optional<DiskJobId> PrefixReadOf(BlockHash hash) const { return Find(prefix_read_by_hash_, hash); }
  std::optional<DiskJobId> WriteBackOfHostSlot(int32_t host_slot) const {
    return Find(write_back_by_host_slot_, host_slot);
  }

  // Calls fn(id, job) for each registered job of kind Kind.
  template <typename Kind, typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [id, job] : jobs_) {
      if (const Kind* k = std::get_if<Kind>(&job)) fn(id, *k);
    }
  }
  template <typename Kind>
  int64_t Count() const {
    int64_t n = 0;
    ForEach<Kind>([&](DiskJobId, const Kind&) { ++n; });
    return n;
  }

  // The registry and its indexes agree; no awaited result outlived its call.
  absl::Status VerifyIntegrity() const;

 private:
  template <typename Map, typename Key>
  static std::optional<DiskJobId> Find(const Map& map, const Key& key) {
    auto it = map.find(key);
    if (it == map.end()) return std::nullopt;
    return it->second;
  }
  DiskJobId Register(bool read, int64_t seq, DiskJob job);
  void Index(DiskJobId id, const DiskJob& job, bool add);

  std::unique_ptr<DiskIoThread> writer_;
  std::unique_ptr<DiskIoThread> reader_;
  absl::flat_hash_map<DiskJobId, DiskJob> jobs_;
  int64_t num_in_flight_[2] = {0, 0};  // writer, reader
  absl::flat_hash_map<DiskJobId, std::optional<absl::Status>> awaited_;  // eviction writes, staged reads
  absl::flat_hash_map<int32_t, DiskJobId> swap_write_by_slot_;
  absl::flat_hash_map<int32_t, DiskJobId> read_by_slot_;  // prefix and swap read-ahead
  absl::flat_hash_map<BlockHash, DiskJobId> demote_write_by_hash_;
  absl::flat_hash_map<BlockHash, DiskJobId> persist_write_by_hash_;
  absl::flat_hash_map<BlockHash, DiskJobId> prefix_read_by_hash_;
  absl::flat_hash_map<int32_t, DiskJobId> write_back_by_host_slot_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_DISK_JOBS_H_
