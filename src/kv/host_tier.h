// HostTier: the tier of host-memory slots below the device — one region from the backend
// (pinned on CUDA, in the background a chunk at a time: HostTierMemory), its slots a
// TierCache whose cached entries keep their token ids.
// Read into the device: a hit is copied host -> device at once. Write from the device:
// cached device blocks are copied here asynchronously ahead of their eviction while the
// forward runs (StartWrites before the forward: the coldest unreferenced blocks, then those
// cached since the last step), and device victims with no lower copy at their eviction (a
// batch the eviction waits for). A written-back slot is held, in no cache map, until its
// copy lands (a HostWriteBackCopy); it joins the host cache then. Evict: a host victim goes
// to the disk tier (DiskTier::TakeHostVictim), or is dropped without one.
// Its slots also serve swaps, long sequences' host-resident blocks, disk read-ahead and
// remote lookups, each holding them outside the cache maps until done.
// Preparation: the region is reserved at once and pinned in the background; slots join
// the pool as their chunk is pinned (AdmitPreparedSlots). Nothing waits for pinning: a slot
// wanted before its chunk is ready is simply not there, as when the tier is full.
// Not thread-safe: the stepping thread's (the pinning thread touches only memory the pool
// does not hand out yet).
#ifndef KVTIER_KV_HOST_TIER_H_
#define KVTIER_KV_HOST_TIER_H_

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/host_tier_memory.h"
#include "kv/lower_tier.h"

namespace kvtier {

class DiskTier;

class HostTier : public SlotTier {
 public:
  // Reserves the region (when the options ask for host blocks) and starts pinning it as
  // TierPreparationOptions say.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(KvContext* ctx);
  ~HostTier() override;

  // The tier its victims go to (null without one).
  void set_below(DiskTier* disk) { disk_ = disk; }
  // A slot's bytes: (block_bytes).
  uint8_t* bytes(int32_t slot) const { return memory_ + static_cast<size_t>(slot) * ctx_->block_bytes; }
  bool on() const { return num_blocks() > 0; }

  Presence Find(const BlockHash& hash) const override {
    return cache_.Contains(hash) ? Presence::kLanded : Presence::kAbsent;
  }
  ClaimResult ClaimForLoad(const BlockChain& chain, int64_t i, int64_t max_blocks, bool landed_only,
                           Claim* claim) override;
  absl::Status StartLoad(const Claim& claim, std::span<const int32_t> tokens, BlockId block) override;
  void Unclaim(const Claim& claim) override;
  std::vector<absl::Status> FinishLoads() override;
  int64_t ReadAhead(const BlockChain&, std::span<const int64_t>, const ReadAheadOptions&) override { return 0; }
  void QueueWrite(BlockId block, const BlockHash& hash, bool computed) override;
  void StartWrites(WritePhase phase) override;

  void AdmitPreparedSlots() override;
  void Evict(int32_t slot) override;
  bool EvictsWithoutWaiting(int32_t slot) const override;
  std::vector<DirtyVictim> TakeDeviceVictims(std::vector<DirtyVictim> victims) override;

  // Copies host slot -> device block now (behind the async copies in flight).
  absl::Status CopyToDevice(int32_t slot, BlockId block);
  // A read-ahead's slot, against `*budget`: evicts only what goes without waiting.
  std::optional<int32_t> TakeSlotForRead(int64_t* budget);
  // A landed write-back copy (HostWriteBackCopy): the slot joins the cache (or is freed).
  void Land(Transfers::Landed& landed) override;
  // Blocks of write-back per step (StartWrites before the forward).
  int64_t WriteBackBudget() const;

  // Preparation (see the top).
  bool preparing() const { return region_ != nullptr && !preparation_ended(); }
  void StartPinning() {
    if (region_ != nullptr) region_->StartPinning();
  }
  void PausePinning() {
    if (region_ != nullptr) region_->PausePinning();
  }
  void ResumePinning() {
    if (region_ != nullptr) region_->ResumePinning();
  }
  void CancelPinning() {
    if (region_ != nullptr) region_->CancelPinning();
  }
  // Blocks until the pinning has ended, then admits what it prepared.
  void WaitUntilPrepared();

 private:
  explicit HostTier(KvContext* ctx);

  DiskTier* disk_ = nullptr;
  std::unique_ptr<HostTierMemory> region_;  // null without a host tier
  uint8_t* memory_ = nullptr;               // (host_blocks, block_bytes): region_'s bytes
  int64_t loads_started_ = 0;               // since the last FinishLoads (done at once)
  // Device blocks cached since the last write-back, with their key then (when the tier has
  // room for a copy of the whole device tier; bounded, stale entries skipped).
  std::deque<std::pair<BlockId, BlockHash>> writeback_queue_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_HOST_TIER_H_
