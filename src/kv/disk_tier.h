// DiskTier: the tier of disk slots below the host — one file of slots (DiskBlockStore, its
// index surviving restarts and crashes), a TierCache over them (the tokens live in the slot
// headers), staging buffers between the device and the disk, and the write-behind that
// makes computed blocks durable. All file I/O runs on the disk lanes of Transfers (one
// writer thread, reader threads), never on the stepping thread.
//
// Write from the device (write-behind, crash durability): each block cached on the device
// is queued, and at the start and end of every step the oldest queued blocks without a
// disk copy are written — from their host copy when there is one, else copied device -> a
// write-behind buffer first (PersistCopy, then PersistWriteJob) — where the store records
// them in its journal. A block already on disk when cached again (recomputed, or a hit) has
// its disk copy made the most recently used and its record renewed (RenewRecordJob), so
// that neither this context nor a restart evicts it as an old block. Bounded: at most
// WriteBehindLimit() such writes in flight, none started while the writer already has that
// many other writes queued (write_behind_skipped_busy), and the queue holds the newest
// 2 x device blocks (older ones dropped, counted, written later only by eviction or
// shutdown). So while the context steps and the disk keeps up, a full block is durable
// within a step plus the writer's time for the blocks queued before it; a step never waits.
// Device victims the host tier cannot take are copied device -> staging in batches the
// eviction waits for (DemoteCopy), then written by the writer (DemoteWriteJob); until that
// write lands the staging buffer and the disk slot are held, the slot in no cache map, and
// a prefix match of the block first waits for the write (Settle). A failed write drops it.
// Write from the host: the coldest cached host blocks without a disk copy are written ahead
// of their eviction (WriteBackJob, before each forward), so that evicting them later costs
// no write; a host victim still without one is written at its eviction, the eviction
// waiting (EvictionWriteJob; TakeHostVictim). While a write-back is in flight its host slot
// stays cached (only read) and is never freed or rewritten: evicting it waits for the write.
// A failed write pauses write-back (and, for write-behind, write-behind) for a few steps.
//
// Read into host memory (read-ahead): for a sequence about to be scheduled, the prompt
// blocks only the disk holds are read into host slots ahead of use (PrefixReadJob), slots
// that are free or whose cached block goes without waiting for a write; landed, they are
// host copies. While such a read is in flight its host slot is held (in no cache map) and
// its disk slot stays cached but out of the disk LRU. Read into the device: blocks nobody
// read ahead are read at their use, still on the reader threads: all of a match's reads are
// submitted at once into staging buffers and each copied to its device block as it lands
// (ReadToDevice), so file reads overlap the device copies.
//
// Read speed (disk_tier_speed.cc): a load plan weighs the disk's recent read speed
// (ReadSpeedWindow over the store's read counts), measured at creation by a probe round (a
// read per reader thread) and by the reads since. When a plan finds disk blocks slow while
// the last read landed over kSpeedStaleAfter ago and no read is in flight, a probe round of
// those blocks is submitted (NoteSlowBlocks; counted), whose landing replaces the figure: a
// figure measured slow never keeps the plans recomputing for good.
//
// Preparation: the file is opened, locked and reserved up to
// TierPreparationOptions::disk_bytes_at_create at creation, the rest on a background thread
// (ChunkedPreparer); slots join the pool as they are reserved. Destruction (Shutdown) drains
// the lanes, persists what the device and host tiers cache (write-behind's queue first, in
// its order: a prompt's blocks take consecutive slots, read in file order by a later
// match) and compacts the index.
// Not thread-safe: the stepping thread's (the lanes touch only their transfers' bytes).
#ifndef KVTIER_KV_DISK_TIER_H_
#define KVTIER_KV_DISK_TIER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/chunked_preparer.h"
#include "kv/lower_tier.h"
#include "kv/read_speed_window.h"
#include "storage/disk_block_store.h"

namespace kvtier {

class HostTier;

class DiskTier : public SlotTier {
 public:
  // Buffers between the device and the disk lanes (pinned on CUDA): each free or held by
  // exactly one transfer in flight (or one call's reads).
  struct Buffers {
    uint8_t* memory = nullptr;  // (count, block_bytes)
    int32_t count = 0;
    std::vector<int32_t> free;
  };
  // One read at a block's use, through a staging buffer (ReadToDevice).
  struct StagedRead {
    int32_t disk_slot;
    Sha256Digest key;  // content key, or a swap's tag
    Tokens tokens;     // the content's expected tokens (none for a swapped block)
    BlockId block;     // written only if the read succeeds
  };

  // Opens the file (recovering its persisted prefix blocks into the cache), starts the disk
  // lanes and reserves the rest of the file in the background; nothing without disk blocks.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Create(KvContext* ctx, HostTier* host);
  ~DiskTier() override;
  // Before destruction: drains the lanes, then keeps what the device and host tiers cache
  // for the next context (written while slots last) and compacts the index.
  void Shutdown();

  bool on() const { return store_ != nullptr; }
  DiskBlockStore* store() const { return store_.get(); }
  uint8_t* staging(int32_t index) const { return Buffer(staging_, index); }
  const Buffers& staging_buffers() const { return staging_; }
  const Buffers& write_behind_buffers() const { return write_behind_.buffers; }
  int64_t write_behind_queued() const { return static_cast<int64_t>(write_behind_.queue.size()); }

  // ---- LowerTier
  Presence Find(const BlockHash& hash) const override;
  bool HasCopy(const BlockHash& hash) const override;
  bool Settle(const BlockHash& hash, bool landed_only) override;
  double SecondsPerBlock() const override;
  bool LoadsOverlapCompute() const override;
  void NoteSlowBlocks(const BlockChain& chain, std::span<const int64_t> blocks) override;
  // The recent read speed SecondsPerBlock divides by (kGuessedBytesPerSecond before any read).
  double ReadBytesPerSecond() const;
  ClaimResult ClaimForLoad(const BlockChain& chain, int64_t i, int64_t max_blocks, bool landed_only,
                           Claim* claim) override;
  absl::Status StartLoad(const Claim& claim, std::span<const int32_t> tokens, BlockId block) override;
  void Unclaim(const Claim& claim) override;
  std::vector<absl::Status> FinishLoads() override;
  int64_t ReadAhead(const BlockChain& chain, std::span<const int64_t> blocks, const ReadAheadOptions& options) override;
  void QueueWrite(BlockId block, const BlockHash& hash, bool computed) override;
  void StartWrites(WritePhase phase) override;
  int64_t PendingWrites() const override;
  int64_t WritesToPump() const override;

  // ---- SlotTier
  void AdmitPreparedSlots() override;
  void Evict(int32_t slot) override;
  std::vector<DirtyVictim> TakeDeviceVictims(std::vector<DirtyVictim> victims) override;

  // A host victim's block (host slot `host_slot`, key `hash`) at its eviction: nothing when
  // on disk already (or once its write in flight lands), else written now, waited for.
  void TakeHostVictim(int32_t host_slot, const BlockHash& hash);
  // The host slots one read-ahead call may fill: a write-back budget per call, and in flight
  // at most a quarter of the host tier, so read-ahead never displaces most of what it caches.
  int64_t ReadAheadBudget() const;
  // Disk -> device through staging buffers on the reader threads (see the top); each read's
  // status, in order (DataLoss: corrupt; NotFound: another block now; counted).
  std::vector<absl::Status> ReadToDevice(const std::vector<StagedRead>& reads);
  // A free staging buffer: first landing the oldest copies, then waiting for the oldest
  // disk write holding one; nullopt only when nothing holds one (no disk tier).
  std::optional<int32_t> AcquireStaging();
  void ReleaseStaging(int32_t index) { staging_.free.push_back(index); }
  // A failed disk read counted by its kind.
  void CountReadFailure(const absl::Status& status);
  // Blocks until the file's reservation has ended, then admits its slots.
  void WaitUntilPrepared();

  // Its kinds: the copies and writes into disk slots, and read-ahead into host slots.
  void Land(Transfers::Landed& landed) override;

  // An NVMe drive's parallel reads, assumed until the disk has delivered blocks here (the
  // reads at creation, TierPreparationOptions::probe_disk_read_speed, usually have by the
  // first plan). A guess above the drive's speed costs little under a load plan (the front
  // computes on until it meets the loads); one below it computes blocks that had loaded.
  static constexpr double kGuessedBytesPerSecond = 4e9;
  // The read speed a load plan weighs is the recent one (ReadSpeedWindow): windows of this
  // many blocks' reads — four rounds of the reader threads, so that one slow read among
  // quick ones does not swing it, yet few enough that a plan or two of loads renew it.
  static constexpr int64_t kSpeedWindowBlocks = 4 * Transfers::kReaderThreads;
  // A read speed with no read landed for this long is stale: a load plan that finds disk
  // blocks slow then has the disk probed again (NoteSlowBlocks), at most one round per
  // period. Without it a figure measured slow (a busy machine at a restart) makes every
  // plan recompute, so nothing is read and the figure never corrects itself. A few seconds:
  // a round costs kReaderThreads block reads (16 MiB of 2 MiB blocks, milliseconds of an
  // NVMe drive: about 0.1% of its time at one round per period), while every period longer
  // is a period of plans recomputing on a wrong figure after the busy moment has passed.
  static constexpr std::chrono::seconds kSpeedStaleAfter{5};
  // Steps without writes after a failed one (see the top).
  static constexpr int64_t kWritePauseSteps = 16;

 private:
  DiskTier(KvContext* ctx, HostTier* host);
  uint8_t* Buffer(const Buffers& buffers, int32_t index) const {
    return buffers.memory + static_cast<size_t>(index) * ctx_->block_bytes;
  }
  uint8_t* write_behind_buffer(int32_t index) const { return Buffer(write_behind_.buffers, index); }
  absl::Status AllocateBuffers(Buffers* buffers, int64_t count);
  // Forgets a cache entry whose slot did not hold its block (stale or corrupt).
  void ForgetSlot(int32_t disk_slot);
  // A read of `slot` right after one of `previous_slot` in the same call: counted when the
  // file holds the two in that order (reads_in_file_order).
  void CountFileOrder(std::optional<int32_t> previous_slot, int32_t slot);
  // Landing, by kind.
  void LandPersistCopy(const PersistCopy& copy, const absl::Status& status);
  void LandDemoteCopy(const DemoteCopy& copy, const absl::Status& status);
  void LandWriteBack(const WriteBackJob& job, const absl::Status& status);
  void LandDemoteWrite(const DemoteWriteJob& job, const absl::Status& status);
  void LandPersistWrite(const PersistWriteJob& job, const absl::Status& status);
  void LandPrefixRead(const PrefixReadJob& job, const absl::Status& status);
  // Host -> disk write-back of the coldest cached host blocks without a disk copy.
  void StartWriteBack();
  // Write-behind: the writes of the oldest queued blocks not on disk yet; `idle`: as many as
  // buffers allow, waiting for the device copies.
  void StartWriteBehind(bool idle);
  // FinishStep(idle)'s write-behind: everything queued, waiting up to the idle budget.
  void DrainWriteBehind();
  int64_t WriteBehindLimit() const;
  // Write-behind queued, or being copied off the device for the disk.
  int64_t WritesNotSubmitted() const;
  // Enters a block written to disk_slot into the cache (LRU at its key's priority).
  void CacheBlock(int32_t disk_slot, const BlockHash& hash);
  // Device -> staging -> disk, synchronously: at shutdown only.
  absl::Status CopyDeviceToDisk(BlockId block, int32_t disk_slot, const BlockHash& hash);
  // What Shutdown writes, in order: the write-behind queue (the order its blocks became
  // full, so that a prompt's blocks take consecutive slots and a prefix match later reads
  // the file in order), then the host's and the device's entries by slot. Repeats and
  // blocks on disk already are in it (skipped).
  std::vector<BlockHash> ShutdownWriteOrder() const;
  // The read speed (disk_tier_speed.cc): probe reads of disk_slots, one round; what the
  // store's read counts say now (the window sees them); a probe read landed.
  void SubmitSpeedProbes(std::span<const int32_t> disk_slots);
  void ObserveReads();
  void LandSpeedProbe();
  ReadSpeedWindow::Reads ReadCounts() const;

  HostTier* const host_;
  std::unique_ptr<DiskBlockStore> store_;
  std::unique_ptr<ChunkedPreparer> preparer_;  // reserves the slots past what Open reserved
  Buffers staging_;
  // Write-behind (see the top): device blocks cached since, with their key then, oldest
  // first, and its own buffers, so that it never takes a staging buffer a swap or eviction
  // waits for.
  struct WriteBehind {
    std::deque<std::pair<BlockId, BlockHash>> queue;
    Buffers buffers;
    int64_t pause_steps = 0;
    std::chrono::milliseconds idle_drain_budget{200};
  } write_behind_;
  int64_t write_back_pause_steps_ = 0;
  std::vector<StagedRead> loads_;  // a prefix match's reads, read at FinishLoads
  std::vector<BlockHash> load_keys_;
  // The read speed (see kSpeedStaleAfter): the recent figure, and the probe round in flight
  // (its reads not landed) and when the last one was submitted.
  const Clock* const clock_;
  ReadSpeedWindow read_speed_;
  struct SpeedProbes {
    int64_t in_flight = 0;
    std::optional<Clock::TimePoint> last_round;
  } speed_probes_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_DISK_TIER_H_
