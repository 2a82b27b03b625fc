// RemoteTier: the tier below the disk shared by every process of a service (Redis, one node
// or a cluster), through RemoteBlockStore's lanes, so that the stepping thread never does
// network I/O. It holds blocks by key only (no slots here).
// Write from the device: blocks computed here (with layer groups, each group's entries under
// their group's key) are put there after the step that filled them, a put buffer's batch at
// a time (a RemotePutBatch in flight until the put lane has encoded it). The staleness
// fence: a queued block is copied into the put buffer only while the device still caches
// it under the queued key (KvContext::DeviceEntryOf); one evicted and written since for
// another key, group or prefix is dropped (puts_stale), and the put lane reads only the
// buffer, so a value never holds another block's bytes. Look up / read ahead: a prompt's blocks that no local tier holds are looked
// up (RemoteGet) before the prefix match uses them: into host slots where the host tier
// lends them (pinned, in place; held, in no cache map, until the match copies them to the
// device, they are found unusable, or they expire), else into bytes of their own, bounded
// by remote max_bytes_in_flight. A landed lookup stays here a few steps for the match that
// asked. Before a load plan counts on the tier, one pipelined EXISTS says which blocks it
// really holds (ProbeRun). Same keys as the other tiers (namespace included), the disk slot
// format as the value, checked before use: a corrupt, foreign or other-token value is a
// miss, and the block is recomputed. Evict: Redis's own (TTL, maxmemory).
// Not thread-safe: the stepping thread's.
#ifndef KVTIER_KV_REMOTE_TIER_H_
#define KVTIER_KV_REMOTE_TIER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kv/lower_tier.h"
#include "remote/remote_block_bytes.h"

namespace kvtier {

class HostTier;
class RemoteBlockStore;

class RemoteTier : public LowerTier {
 public:
  // Opens the store (nothing happens on the network until it is used); null without a url.
  static absl::StatusOr<std::unique_ptr<RemoteTier>> Create(KvContext* ctx, HostTier* host);
  // Sends what is queued (each batch bounded by the timeout), then closes the store.
  ~RemoteTier() override;

  Tier tier() const override { return Tier::kRemote; }
  bool local() const override { return false; }
  const RemoteBlockStore& store() const { return *store_; }

  Presence Find(const BlockHash& hash) const override;
  int64_t ProbeRun(const BlockChain& chain, int64_t first, int64_t max) override;
  double SecondsPerBlock() const override;
  ClaimResult ClaimForLoad(const BlockChain& chain, int64_t i, int64_t max_blocks, bool landed_only,
                           Claim* claim) override;
  absl::Status StartLoad(const Claim& claim, std::span<const int32_t> tokens, BlockId block) override;
  void Unclaim(const Claim&) override {}
  std::vector<absl::Status> FinishLoads() override;
  int64_t ReadAhead(const BlockChain& chain, std::span<const int64_t> blocks, const ReadAheadOptions& options) override;
  void QueueWrite(BlockId block, const BlockHash& hash, bool computed) override;
  void StartWrites(WritePhase phase) override;
  int64_t PendingWrites() const override;
  int64_t WritesToPump() const override { return PendingWrites(); }

  // A lookup landed (RemoteGet): kept for the match that asked, or dropped.
  void Land(Transfers::Landed& landed) override;
  // Blocks until every computed block queued has been sent (tests, benchmarks; also done
  // when the tier is destroyed).
  void FlushPuts();
  // Host slots held by lookups, in flight or landed (the integrity check's).
  template <typename Fn>
  void ForEachHeldHostSlot(Fn fn) const {
    for (const auto& [hash, lookup] : landed_) {
      if (lookup.host_slot >= 0) fn(lookup.host_slot);
    }
    ctx_->transfers.ForEach<RemoteGet>([&](TransferId, const RemoteGet& get) {
      if (get.host_slot >= 0) fn(get.host_slot);
    });
  }
  int64_t num_host_slot_lookups() const { return host_slot_lookups_; }

 private:
  // A lookup that landed: the block's bytes (or the host slot holding them), or why not.
  struct Landed {
    absl::Status status;  // OK (bytes valid), NotFound (a miss), else unusable
    RemoteBlockBytes bytes;
    int64_t landed_step = 0;
    int32_t host_slot = -1;
  };
  // A remote hit being copied to the device (StartLoad until FinishLoads).
  struct Load {
    BlockId block;
    const uint8_t* bytes;
    BlockHash hash;
  };
  RemoteTier(KvContext* ctx, HostTier* host);
  // The landed hit of `hash`, nullptr when none (never waits).
  const Landed* LandedHit(const BlockHash& hash) const;
  // For block i of a match: its landed lookup when a valid hit, asking for it (and the
  // blocks after it) first and waiting while lookups land, at most the timeout without one.
  const Landed* Hit(const BlockChain& chain, int64_t i, int64_t max_blocks);
  // Submits lookups of `blocks` not asked yet while the bounds allow; whether one of them
  // is in flight.
  bool LookUp(const BlockChain& chain, std::span<const int64_t> blocks);
  // The blocks from `first` on that are worth a lookup: up to a known miss, skipping those
  // the device or host tier holds.
  std::vector<int64_t> ToLookUp(const BlockChain& chain, int64_t first, int64_t max_blocks) const;
  // Forgets landed lookups nobody took for a while (each step's end).
  void Expire();
  // Drops a landed lookup (its bytes, its host slot).
  void Drop(const BlockHash& hash);
  void QueuePut(BlockId block, const BlockHash& hash);
  // Copies queued blocks still cached to the put buffer and hands them to the store, as far
  // as its bound allows (the rest wait for a later call).
  void StartPuts();
  // The rest of the put queue, a put buffer at a time: `buffer_free` returns once the next
  // put would be accepted (false: the rest wait).
  void DrainPutQueue(absl::FunctionRef<bool()> buffer_free);

  KvContext* const ctx_;
  HostTier* const host_;
  std::unique_ptr<RemoteBlockStore> store_;
  absl::flat_hash_map<BlockHash, Landed> landed_;
  int64_t landed_bytes_ = 0;      // bytes held by landed lookups
  int64_t host_slot_lookups_ = 0;  // lookups holding host slots (in flight or landed)
  int64_t step_ = 0;
  std::vector<Load> loads_;
  // Computed device blocks waiting to be put, with their key then (checked again before
  // the copy).
  std::deque<std::pair<BlockId, BlockHash>> put_queue_;
  uint8_t* put_buffer_ = nullptr;  // (put_buffer_blocks_, block_bytes), from the backend
  int64_t put_buffer_blocks_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_KV_REMOTE_TIER_H_
