// Transfers: every move of KV bytes between the tiers that is in flight — device -> host
// copies (the backend's copy engine, by ticket), disk writes and reads (DiskIoThread: one
// writer thread, and a reader of kReaderThreads so that reads never queue behind writes),
// remote gets and put batches (RemoteBlockStore's lanes) — in one registry, each transfer
// one value of Transfer (transfer_kinds.h) saying what it moves and what landing it must do.
// A transfer is registered when started and leaves the registry when it lands: Land hands
// each finished one, lane by lane in submission order, to the one landing function the
// owner set (set_land), which is the only place a transfer's effects happen. The reverse
// indexes the KV manager asks by ("is this disk slot being written?", "is this block being
// read ahead?") are kept here in step with the registry, so no caller keeps its own.
// Waits are counted (copy stalls, disk write and read-ahead waits) in the KV counters.
// Not thread-safe: one thread (the KV manager's stepping thread) starts, lands and waits;
// the I/O threads only run what they were given.
#ifndef KVTIER_KV_TRANSFERS_H_
#define KVTIER_KV_TRANSFERS_H_

#include <chrono>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/disk_io_thread.h"
#include "kv/kv_counters.h"
#include "kv/transfer_kinds.h"

namespace kvtier {

class Backend;
class RemoteBlockStore;

class Transfers {
 public:
  struct Landed {
    TransferId id;
    Transfer transfer;
    absl::Status status;  // the copy's, write's, read's or get's result
  };
  using LandFn = std::function<void(Landed&)>;
  // One device -> host copy of a batch: the device block read and where its bytes go.
  struct Copy {
    Transfer transfer;
    BlockId block;
    uint8_t* destination;
  };

  // Reads in flight at once on the disk: an NVMe drive delivers several times one thread's
  // sequential preads of whole blocks only with several in flight.
  static constexpr int kReaderThreads = 8;

  // `backend` and `counters` must outlive this.
  Transfers(Backend* backend, KvCacheCounters* counters, size_t block_bytes);
  ~Transfers();  // stops the disk threads (each runs what is queued first)
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;

  // The landing function (the owner's), called for every transfer that lands.
  void set_land(LandFn land) { land_ = std::move(land); }
  // Starts the disk lanes' threads over `store` (which must outlive CloseDisk).
  void OpenDisk(DiskBlockStore* store);
  // Stops the disk threads, reader first (their unlanded results are dropped).
  void CloseDisk();
  bool disk_open() const { return writer_ != nullptr; }
  // The remote lanes' store (must outlive this, or be cleared first with nullptr).
  void OpenRemote(RemoteBlockStore* store) { remote_ = store; }

  // Starts one batch of device -> host copies; on success each is registered (its device
  // block fenced until it lands: ReadingBatch) and the batch's number returned (batches
  // land in this order; the copies of batch b are TransferId{kCopy, b, i}).
  absl::StatusOr<int64_t> StartCopies(std::vector<Copy> copies);
  // The newest copy batch still reading `block` (it must not be handed out for writing).
  std::optional<int64_t> ReadingBatch(BlockId block) const;
  static TransferId CopyBatch(int64_t batch) { return TransferId{Lane::kCopy, batch, 0}; }
  // Queues a disk write of `data` (nullptr for a RenewRecordJob) as key and tokens into
  // disk_slot; a SwapWriteJob's content is private to the swap, every other kind's cached.
  TransferId SubmitDiskWrite(Transfer transfer, int32_t disk_slot, const Sha256Digest& key,
                             std::span<const int32_t> tokens, const void* data);
  // Queues a read of disk_slot into `dest` if it holds `key` with `tokens`.
  TransferId SubmitDiskRead(Transfer transfer, int32_t disk_slot, const Sha256Digest& key,
                            std::span<const int32_t> tokens, void* dest);
  // Queues a read of disk_slot only to measure the disk's read speed.
  TransferId SubmitDiskProbe(int32_t disk_slot);
  // Queues a remote lookup (into `destination` when given: block_bytes, held until it
  // lands); the store's refusal otherwise.
  absl::Status SubmitRemoteGet(RemoteGet get, std::span<const int32_t> tokens, uint8_t* destination);
  // The put buffer was staged with `blocks` puts: busy until the put lane encoded them.
  void NoteRemotePutBatch(int64_t blocks);

  // Lands every finished transfer of `lanes` (lane by lane, in submission order). Never
  // waits.
  void Land(Lanes lanes = kAllLanes);
  // Lands what `id`'s lane has finished; then, if `id` is still in flight, waits for it
  // (counted: a copy stall, a disk write or read-ahead wait) and lands it.
  void Await(std::optional<TransferId> id);
  // The result of an EvictionWriteJob or StagedReadJob, waiting (uncounted) and landing.
  absl::Status AwaitResult(TransferId id);
  // Waits for everything submitted on the lane, and lands it (tests, shutdown).
  void AwaitLane(Lane lane) { Await(last(lane)); }
  // Blocks until a remote get has finished or `deadline`; lands what finished. Whether one
  // landed.
  bool AwaitRemoteGet(std::chrono::steady_clock::time_point deadline);

  bool InFlight(TransferId id) const { return registry_.contains(id); }
  int64_t num_in_flight(Lane lane) const { return num_in_flight_[static_cast<int>(lane)]; }
  // Copy batches in flight.
  int64_t num_copy_batches() const { return static_cast<int64_t>(copy_batches_.size()); }
  // The oldest copy batch in flight (its first copy); nullopt when none.
  std::optional<TransferId> oldest_copy() const {
    if (copy_batches_.empty()) return std::nullopt;
    return CopyBatch(copy_batches_.front().id);
  }
  // The newest transfer submitted on the lane (landed or not); nullopt when none.
  std::optional<TransferId> last(Lane lane) const;
  // Disk writes the writer thread has not finished (landed or not).
  int64_t num_disk_writes_unfinished() const { return writer_ != nullptr ? writer_->num_unfinished() : 0; }

  // Reverse indexes (nullopt: none in flight).
  std::optional<TransferId> SwapWriteOnSlot(int32_t disk_slot) const { return Find(swap_write_by_slot_, disk_slot); }
  std::optional<TransferId> ReadOnSlot(int32_t disk_slot) const { return Find(read_by_slot_, disk_slot); }
  std::optional<TransferId> DemoteWriteOf(const BlockHash& hash) const { return Find(demote_write_by_hash_, hash); }
  std::optional<TransferId> PersistWriteOf(const BlockHash& hash) const { return Find(persist_write_by_hash_, hash); }
  std::optional<TransferId> PrefixReadOf(const BlockHash& hash) const { return Find(prefix_read_by_hash_, hash); }
  std::optional<TransferId> RemoteGetOf(const BlockHash& hash) const { return Find(remote_get_by_hash_, hash); }
  std::optional<TransferId> WriteBackOfHostSlot(int32_t host_slot) const {
    return Find(write_back_by_host_slot_, host_slot);
  }

  // Calls fn(id, transfer) for each registered transfer of kind Kind, oldest first per lane.
  template <typename Kind, typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [id, transfer] : registry_) {
      if (const Kind* k = std::get_if<Kind>(&transfer)) fn(id, *k);
    }
  }
  template <typename Kind>
  int64_t Count() const {
    int64_t n = 0;
    ForEach<Kind>([&](TransferId, const Kind&) { ++n; });
    return n;
  }

  // The registry and its indexes agree, the lane counts too, and no awaited result
  // outlived its call.
  absl::Status VerifyIntegrity() const;

 private:
  template <typename Map, typename Key>
  static std::optional<TransferId> Find(const Map& map, const Key& key) {
    auto it = map.find(key);
    if (it == map.end()) return std::nullopt;
    return it->second;
  }
  void Register(TransferId id, Transfer transfer);
  // Adds (or removes) the transfer's entries in the reverse indexes.
  void Index(TransferId id, const Transfer& transfer, bool add);
  // Takes `id` out of the registry and hands it to the landing function.
  void LandOne(TransferId id, absl::Status status, RemoteBlockBytes bytes = {});
  // The copy lane: lands every batch up to `batch` with `status`.
  void LandCopiesUpTo(int64_t batch, const absl::Status& status);
  void LandCopies();
  void LandDisk(Lane lane);
  void LandRemote();

  Backend* const backend_;
  KvCacheCounters* const counters_;
  const size_t block_bytes_;
  LandFn land_;
  std::unique_ptr<DiskIoThread> writer_;
  std::unique_ptr<DiskIoThread> reader_;
  RemoteBlockStore* remote_ = nullptr;
  std::map<TransferId, Transfer> registry_;
  int64_t num_in_flight_[kNumLanes] = {};
  int64_t remote_seq_ = 0;  // gets and put batches numbered here
  // Copy batches in flight, oldest first: their numbers (here) and the backend's tickets
  // (which need not be distinct: a synchronous backend's are all done at once).
  struct CopyBatchTicket {
    int64_t id;
    int64_t ticket;
  };
  std::deque<CopyBatchTicket> copy_batches_;
  int64_t copy_batch_seq_ = 0;
  absl::flat_hash_map<BlockId, int64_t> reading_batch_;  // device block -> newest batch reading it
  absl::flat_hash_map<TransferId, std::optional<absl::Status>> awaited_;  // eviction writes, staged reads
  absl::flat_hash_map<int32_t, TransferId> swap_write_by_slot_;
  absl::flat_hash_map<int32_t, TransferId> read_by_slot_;  // prefix and swap read-ahead
  absl::flat_hash_map<BlockHash, TransferId> demote_write_by_hash_;
  absl::flat_hash_map<BlockHash, TransferId> persist_write_by_hash_;
  absl::flat_hash_map<BlockHash, TransferId> prefix_read_by_hash_;
  absl::flat_hash_map<int32_t, TransferId> write_back_by_host_slot_;
  absl::flat_hash_map<BlockHash, TransferId> remote_get_by_hash_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_TRANSFERS_H_
