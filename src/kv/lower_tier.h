// LowerTier: a tier below the device — the host region, the disk file, the remote tier —
// as the KV cache manager's algorithms see it, with the verbs every such tier has: look a
// block up, read it into the device (a prefix match) or into host memory ahead of its use
// (read-ahead, a load plan's loads), write blocks computed on the device into it, and
// evict. The prefix walk, read-ahead, load plans and the write paths are written once
// over the list of tiers below, fastest first; a tier is one class behind this interface.
// SlotTier adds what the tiers of slots (host, disk) share: taking a slot, evicting its
// least recently used cached entry one tier down.
// Not thread-safe: the stepping thread's, as the manager.
#ifndef KVTIER_KV_LOWER_TIER_H_
#define KVTIER_KV_LOWER_TIER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kv/kv_context.h"
#include "kv/tier_cache.h"

namespace kvtier {

// When the manager asks the tiers to move the blocks queued for writing.
enum class WritePhase {
  kBeforeForward,  // a step is scheduled: writes that overlap its forward
  kStepEnd,        // a step ended with work left
  kIdleStep,       // a step ended with nothing left to run: as much as the idle budget allows
  kIdlePump,       // between steps of an idle context: what goes without waiting
};

// How read-ahead starts its reads.
struct ReadAheadOptions {
  bool back_first = false;     // a load plan's: the back of the chain first
  int64_t max_host_slots = -1;  // host slots the reads may fill (-1: the tier's own budget)
};

// A device eviction's victim with no copy below: its block (readable until the call
// returns), key, priority and tokens.
struct DirtyVictim {
  BlockId block;
  BlockHash hash;
  int32_t priority;
  Tokens tokens;
};

class LowerTier {
 public:
  // Where a block stands in a tier.
  enum class Presence {
    kAbsent,   // not here (for the remote tier: a lookup found it missing)
    kUnknown,  // may be here; only a lookup tells (the remote tier, not asked yet)
    kStored,   // here, read when asked (disk)
    kLoading,  // being brought into host memory (a read-ahead, a lookup in flight)
    kLanded,   // in host memory, ready to copy to the device
  };
  // A block found for a load to the device, kept from eviction until its load or Unclaim.
  struct Claim {
    BlockHash hash;
    int32_t slot = -1;              // the tier's slot (host, disk)
    const uint8_t* bytes = nullptr;  // its bytes in host memory (host, remote)
  };
  enum class ClaimResult { kMiss, kHit, kStop };

  virtual ~LowerTier() = default;
  virtual Tier tier() const = 0;
  // Whether the tier is this process's own (host memory, disk): a block there, or on its
  // way into host memory, is fast for a load plan; the remote tier's are all slow.
  virtual bool local() const { return true; }

  // ---- Look up
  // Where the block stands here now; never waits.
  virtual Presence Find(const BlockHash& hash) const = 0;
  // Whether the tier caches a copy of its own (in a slot, or on its way into one).
  virtual bool HasCopy(const BlockHash& hash) const { return false; }
  // Waits for this tier's moves of the block under way (a write of it, a read of it into
  // host memory) so that Claim sees where it ends up. False when `landed_only` and it is
  // still loading: the walk stops before it.
  virtual bool Settle(const BlockHash& hash, bool landed_only) { return true; }
  // How many of blocks [first, max) the tier holds in a row from `first` (for kUnknown
  // blocks: one lookup of them all).
  virtual int64_t ProbeRun(const BlockChain& chain, int64_t first, int64_t max) { return 0; }
  // Load time per block: block bytes over the bandwidth the tier delivered (or a guess).
  virtual double SecondsPerBlock() const { return 0; }
  // Whether its loads can run while a load plan's front computes.
  virtual bool LoadsOverlapCompute() const { return true; }
  // A load plan found chain blocks `blocks` slow here and is about to weigh them by
  // SecondsPerBlock: a tier whose figure has gone stale may measure again (the disk tier
  // reads a few of them), so that a later plan decides on a fresh one. Never waits.
  virtual void NoteSlowBlocks(const BlockChain& chain, std::span<const int64_t> blocks) {}

  // ---- Read into the device (a prefix match)
  // kHit: block i of the chain is here and claimed; kMiss: not here; kStop: here but not
  // usable now (other tokens, or `landed_only` and a read would be waited for).
  virtual ClaimResult ClaimForLoad(const BlockChain& chain, int64_t i, int64_t max_blocks, bool landed_only,
                                   Claim* claim) = 0;
  // Loads a claimed block into device block `block`: at once, or queued for FinishLoads.
  // An error ends the walk there (the block is not used).
  virtual absl::Status StartLoad(const Claim& claim, std::span<const int32_t> tokens, BlockId block) = 0;
  virtual void Unclaim(const Claim& claim) = 0;
  // The result of each load started since the last call, in order.
  virtual std::vector<absl::Status> FinishLoads() = 0;

  // ---- Read ahead into host memory
  // Starts bringing chain blocks `blocks` (each found kStored or kUnknown here) into host
  // memory; returns how many it started.
  virtual int64_t ReadAhead(const BlockChain& chain, std::span<const int64_t> blocks,
                            const ReadAheadOptions& options) = 0;

  // ---- Write from the device
  // A block just cached on the device (`computed` here, or loaded from a tier).
  virtual void QueueWrite(BlockId block, const BlockHash& hash, bool computed) {}
  virtual void StartWrites(WritePhase phase) {}
  // Blocks on their way here, not there yet (the statistics' pending writes).
  virtual int64_t PendingWrites() const { return 0; }
  // What an idle writer still has to move (0: done).
  virtual int64_t WritesToPump() const { return 0; }

  // ---- Landing
  // What a finished transfer into this tier does (KvCacheManager::Land hands each to the
  // tier that owns its kind).
  virtual void Land(Transfers::Landed& landed) {}
};

// A tier of slots below the device (host, disk): a TierCache and its eviction one tier down.
class SlotTier : public LowerTier {
 public:
  SlotTier(KvContext* ctx, Tier tier, int64_t num_blocks, bool keeps_tokens)
      : ctx_(ctx), cache_(tier, num_blocks, 0, ctx->options.block_tokens, keeps_tokens) {}

  Tier tier() const override { return cache_.tier(); }
  TierCache& cache() { return cache_; }
  const TierCache& cache() const { return cache_; }
  int64_t num_blocks() const { return cache_.num_blocks(); }
  bool HasCopy(const BlockHash& hash) const override { return cache_.Contains(hash); }

  // A free slot for cached or swapped data, evicting the LRU cached entry (Evict) when none
  // is free; nullopt when there is none (or only victims whose eviction would wait, with
  // `may_wait` false: a read that may as well not happen never makes the step wait for a
  // disk write to make room). Slots still being prepared count as full.
  std::optional<int32_t> TakeSlot(bool may_wait = true);
  // Makes the slots prepared in the background since the last call usable; notes a
  // preparation that ended.
  virtual void AdmitPreparedSlots() = 0;
  // Evict: moves a cached slot's content one tier down, or drops it from the last.
  virtual void Evict(int32_t slot) = 0;
  // Whether evicting `slot` (Evict) is done at once, waiting for no disk write.
  virtual bool EvictsWithoutWaiting(int32_t slot) const { return true; }
  // Write from the device at its eviction: takes the victims it can (their copies landed
  // before it returns: the caller may overwrite the device blocks), returns the others.
  virtual std::vector<DirtyVictim> TakeDeviceVictims(std::vector<DirtyVictim> victims) = 0;

  // How the tier's background preparation ended (once AdmitPreparedSlots saw it end).
  bool preparation_ended() const { return preparation_ended_; }
  const std::string& preparation_error() const { return preparation_error_; }

  // Victims scanned for one that evicts without waiting.
  static constexpr int64_t kVictimsScanned = 64;

 protected:
  void NotePreparationEnd(const absl::Status& status);

  KvContext* const ctx_;
  TierCache cache_;

 private:
  std::optional<int32_t> PopVictimWithoutWaiting();

  bool preparation_ended_ = false;
  std::string preparation_error_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_LOWER_TIER_H_
