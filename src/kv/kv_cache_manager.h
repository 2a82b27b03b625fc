// KvCacheManager: the front end of KV memory. It keeps every sequence's block table, the
// prefix index over the device tier (full blocks keyed by chained SHA-256, block_hash.h)
// and the eviction policy; the tiers below the device — host (HostTier), disk (DiskTier),
// remote (RemoteTier) — are stores behind one interface (LowerTier, lower_tier.h), and
// every move of bytes between tiers is a transfer in one registry (Transfers), landed by
// one function (Land, kv_cache_landing.cc). The scheduler asks it "can these positions be
// held", "match this prompt", "swap this one out"; it never walks a pool itself.
//
// Prefix blocks are shared only between sequences of the same cache namespace (the key's
// scope). Every cached block keeps its token ids (device and host beside the cache maps,
// disk in its slot headers, remote in its values), and every hit from any tier compares
// them with the request's: a block whose tokens differ is a miss (prefix_token_mismatch).
//
// Written once over the tiers below, fastest first: the prefix walk (MatchPrefix: each
// block from the device, else the first tier below that holds it, claimed and loaded),
// read-ahead and a load plan's loads (ReadAhead, LoadPrefixAhead: each tier brings the
// chain's blocks it alone holds into host memory), the load plan's probes, and the write
// paths (a block cached on the device is queued to every tier below; each tier moves its
// queue before the forward, at the step's end, and when idle). Eviction: a device victim
// with no copy below goes to the first tier below with room (its copy waited for: the
// caller may overwrite the block); a tier's victim moves one tier down (SlotTier::Evict).
// Swaps use the tiers with slots: host slots first, then disk slots.
//
// What a transfer in flight reads or writes is fenced until it lands: its device blocks
// are not handed out for writing (AllocateDeviceBlocks waits, counting the stall), a
// slot a transfer fills is held in no cache map, and a slot it reads stays cached and is
// neither freed nor rewritten (each tier's header says how).
// Tier preparation: Create returns before the lower tiers are ready, whatever their size
// (host pinning and disk reservation run in the background, see host_tier.h and
// disk_tier.h); AdmitPreparedSlots, at every step, makes the slots prepared since usable.
// Not thread-safe: driven under the engine lock by the stepping thread (the I/O threads
// touch only their transfers' bytes and slots).
#ifndef KVTIER_KV_KV_CACHE_MANAGER_H_
#define KVTIER_KV_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/host_resident_kv.h"
#include "kv/block_key_chain.h"
#include "kv/disk_tier.h"
#include "kv/grouped_block_tables.h"
#include "kv/host_tier.h"
#include "kv/kv_cache_options.h"
#include "kv/kv_context.h"
#include "kv/kv_stats.h"
#include "kv/remote_tier.h"

namespace kvtier {

class Backend;

class KvCacheManager {
 public:
  // Opens the tiers (the host region through the backend, the disk store recovering its
  // persisted prefix blocks, the remote store). `backend` must outlive the manager and have
  // its device pool allocated with options.device_blocks blocks.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(const KvCacheOptions& options, Backend* backend);
  ~KvCacheManager();  // persists cached blocks to disk when the disk tier is on

  int64_t block_tokens() const { return ctx_.options.block_tokens; }
  int64_t BlocksForTokens(int64_t num_tokens) const {
    return (num_tokens + block_tokens() - 1) / block_tokens();
  }
  size_t block_bytes() const { return ctx_.block_bytes; }
  int64_t num_device_blocks() const { return ctx_.device.num_blocks(); }
  // Free device blocks plus unreferenced cached ones (which can be evicted on demand).
  // With layer groups: the pool's free blocks of one group's layers.
  int64_t num_available_device_blocks() const {
    if (grouped_) return grouped_->num_free();
    return ctx_.device.pool().num_free() + ctx_.device.lru().size();
  }
  // The per-group tables when the options gave layer groups (KvCacheOptions::layer_groups),
  // else null. BlockTable then returns group 0's table (empty exactly when the sequence
  // holds nothing); the forward reads every group's table from here.
  const GroupedBlockTables* grouped() const { return grouped_ ? &*grouped_ : nullptr; }
  // The key chain of a sequence in `cache_namespace` ("" is the default namespace; the
  // caller validated it). The sequence keeps it and passes it to MatchPrefix, OnComputed
  // and ReadAhead with its tokens, so each block's key is computed once; without one
  // (nullptr) those compute the default namespace's keys each call.
  BlockKeyChain KeyChain(std::string_view cache_namespace) const;

  // ---- Block tables
  // Device blocks the sequence must still get to hold positions [0, num_tokens) (its
  // host-resident blocks count as held).
  int64_t NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const;
  // Grows the sequence's device block table to cover [0, num_tokens), evicting unreferenced
  // cached blocks (demoted down the tiers) as needed. All or nothing: ResourceExhausted,
  // and nothing changed, when too few device blocks are available.
  absl::Status Reserve(SequenceId seq, int64_t num_tokens);
  // Returns the sequence's device blocks and any swapped-out copies. Hashed full blocks
  // stay behind as prefix-cache entries.
  void Release(SequenceId seq);
  std::span<const BlockId> BlockTable(SequenceId seq) const;
  // Records that positions [0, num_computed) of the sequence hold valid K/V, so its newly
  // completed blocks become prefix-cache entries (evicted after those of lower priority)
  // and are queued to the tiers below.
  void OnComputed(SequenceId seq, std::span<const int32_t> tokens, int64_t num_computed, int32_t priority = 0,
                  BlockKeyChain* keys = nullptr);
  // Parallel sampling: gives `child` (holding nothing) the blocks of `parent` covering
  // positions [0, num_tokens), which the parent has computed: the full blocks shared, the
  // last partial block copied into a new device block (copy on write; kv_cache_fork.cc).
  // ResourceExhausted, nothing changed, when no device block is available for the copy.
  // With layer groups: every group's blocks a query at num_tokens reads, the same way
  // (GroupedBlockTables::Fork); refused when the parent's windows have gone past them.
  absl::Status Fork(SequenceId parent, SequenceId child, int64_t num_tokens);
  // Long sequences (docs/LONG_CONTEXT.md, kv_cache_streaming.cc): moves the sequence's
  // oldest device blocks lying wholly before `num_computed` to host slots of its own, read
  // in place by the forward, until num_available_device_blocks() reaches
  // `device_blocks_wanted` or none is left. Returns the blocks moved; the backend's error
  // when a copy failed (the block stays on the device).
  absl::StatusOr<int64_t> MoveOldBlocksToHost(SequenceId seq, int64_t num_computed, int64_t device_blocks_wanted);
  // What the forward reads from the host for the sequence (empty for an ordinary one); its
  // BlockTable then starts at logical block HostResident(seq).blocks.size().
  // With layer groups the oldest computed blocks of the full-attention groups move, the
  // group with the fewest moved first (GroupedBlockTables::MoveFrontToHost), and each
  // `group`'s are read on their own: its GroupBlockTable::host_blocks blocks right before
  // its table (empty for group -1).
  HostResidentKv HostResident(SequenceId seq, int64_t group = -1) const;
  // Pins the sequence's first `num_blocks` full blocks (computed): kept on the device tier,
  // never evicted, until UnpinAll. Idempotent per block. With layer groups: every group's
  // entry a match of those blocks reads (GroupedBlockTables::PinPrefix), found by the
  // sequence's `tokens`.
  void PinPrefix(SequenceId seq, int64_t num_blocks, std::span<const int32_t> tokens = {},
                 BlockKeyChain* keys = nullptr);
  void UnpinAll();
  int64_t num_pinned_blocks() const {
    return grouped_ ? grouped_->num_pinned() : static_cast<int64_t>(pinned_.size());
  }

  // ---- Prefix reuse, over the tiers below (kv_cache_prefix.cc, kv_cache_load_plan.cc)
  // For a sequence with no blocks yet: maps the longest run of its full blocks found in
  // any tier (device hits shared, the others loaded) and returns the tokens covered.
  // Always leaves one token to compute. Never evicts a referenced block; stops at the first
  // miss, corrupt block, block with other tokens, or shortage. `priority` raises the
  // eviction priority of the blocks it reuses. A sequence holding only full computed
  // blocks (a load plan's front) gets the run from its first block it does not hold; one
  // holding a partial block gets nothing. `max_blocks` >= 0 caps the blocks held after.
  // `landed_only` (a load plan's attach): only what is in memory now, waiting for nothing.
  // With layer groups: every block the next query reads, in every group, from the device's
  // group entries or loaded from a tier below (MatchGroupedPrefix).
  int64_t MatchPrefix(SequenceId seq, std::span<const int32_t> tokens, int32_t priority = 0,
                      BlockKeyChain* keys = nullptr, int64_t max_blocks = -1, bool landed_only = false);
  // Gives a MatchPrefix result back unused (the sequence could not start yet): releases
  // its blocks, which stay cached, and takes its hits out of the counters.
  void UnmatchPrefix(SequenceId seq);
  // For a waiting sequence: starts reading what it will need into host memory — its
  // swapped-out disk blocks, or, holding nothing yet, the prompt's blocks only a slow tier
  // holds — bounded per call and in flight. True while one of its prefix blocks is being
  // read: the scheduler then lets it wait a step rather than wait for it.
  bool ReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys = nullptr);
  // Load or recompute (engine/load_plan.h). From the first block the sequence does not
  // hold: `fast_blocks` in memory (device, host) or on their way there, then `slow_blocks`
  // only a slow tier holds (a remote run confirmed by one lookup). Their load time per
  // block (measured, or guessed), and whether their loads can run while the front computes.
  struct SlowPrefix {
    int64_t fast_blocks = 0;
    int64_t slow_blocks = 0;
    double load_seconds_per_block = 0;
    bool overlap = false;
  };
  SlowPrefix ProbeSlowPrefix(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys = nullptr);
  // Starts loading prompt blocks [from, to) into host memory, every one at once, from the
  // back (block to - 1 first), so that what has landed is a run at the back growing toward
  // the front while the front computes toward it. Returns the disk reads it started.
  // With layer groups (here and in the probes): a block is every group's block that a
  // match at `to` (ProbeSlowPrefix: at the run's end) reads.
  int64_t LoadPrefixAhead(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from, int64_t to);
  // A load plan's progress over prompt blocks [from, to): `landed_from`, the first block of
  // the run of landed blocks ending at `to` (to itself when block to - 1 has not landed);
  // `landed`, the blocks of [from, to) landed, in the run or not; `loading`, whether a
  // block before the run is still loading, and the load time per block of the tiers
  // loading (the slowest). Lands what finished first; never waits.
  struct LoadFrontier {
    int64_t landed_from = 0;
    int64_t landed = 0;
    bool loading = false;
    double load_seconds_per_block = 0;
  };
  LoadFrontier ProbeLoadFrontier(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from, int64_t to);

  // ---- Swaps (kv_cache_swap.cc)
  // Moves every device block of the sequence to host slots (disk slots when the host is
  // full); with layer groups only the blocks its computed positions still need in each
  // group (GroupedBlockTables::KeptBlocks). ResourceExhausted when neither tier has room (the caller recomputes instead).
  // The copies are only started (smallest batches first); the device blocks are free for
  // others at once (handed out once their copy has landed), the disk writes follow.
  absl::Status SwapOut(SequenceId seq);
  // Brings a swapped-out sequence back to device blocks (first waiting for what its slots
  // wait on). ResourceExhausted when too few device blocks; DataLoss/IoError when a copy is
  // corrupt or unreadable, or the swap-out failed: the swapped copy is then discarded and
  // the caller recomputes. With `prefetch`, host copies are only started: the blocks may
  // be read from the next step on, after WaitForPrefetches.
  absl::Status SwapIn(SequenceId seq, bool prefetch = false);
  bool IsSwappedOut(SequenceId seq) const { return swapped_.contains(seq); }
  int64_t SwappedBlocks(SequenceId seq) const;
  // Blocks until SwapIn(prefetch)'s copies have landed; the backend's error when one failed.
  absl::Status WaitForPrefetches();

  // ---- The step (kv_cache_step.cc)
  // Right before a step's forward: lands what finished, then has every tier below start
  // the writes that overlap the forward (host write-back, disk write-back and write-behind).
  void StartBackgroundCopies();
  // At the end of every step: lands what finished and has every tier below move its queued
  // writes. `idle` (nothing left to run): as much as options.idle_drain_budget allows.
  void FinishStep(bool idle);
  // Between steps of an idle context (the engine's idle writer, under its lock): what
  // FinishStep(idle) left queued goes on, waiting for nothing. The blocks whose writes
  // remain, for a later call (0: done).
  int64_t PumpIdleWrites();
  // Makes the host and disk slots prepared in the background since the last call usable
  // (HostTier and DiskTier::WaitUntilPrepared wait for the rest).
  void AdmitPreparedSlots();

  // ---- The tiers and their numbers
  HostTier& host() { return *host_; }
  DiskTier& disk() { return *disk_; }
  Transfers& transfers() { return ctx_.transfers; }
  KvStats Stats() const;
  const KvCacheCounters& counters() const { return ctx_.counters; }
  // Every invariant: pools, tables, cache maps, LRU sets, buffers and the transfers in
  // flight agree. Internal error naming the first violation.
  absl::Status VerifyIntegrity() const;

 private:
  // A swapped-out sequence: its slots, and the state of the copies filling them.
  struct SwapState {
    std::vector<SlotRef> slots;  // in block order
    uint64_t generation = 0;     // distinguishes swap-outs of the same sequence id
    int64_t last_batch = 0;     // the swap-out's last copy batch; 0 when all landed
    absl::Status failed;         // a copy or disk write failed: unusable
    // With layer groups: the positions computed at the swap-out, which say each group's
    // blocks (GroupedBlockTables::Restore); slots[i] holds KeptBlocks' i-th block.
    int64_t grouped_computed = 0;
  };
  struct SequenceBlocks {
    // Long sequences: its first host_slots.size() logical blocks, in host slots it holds
    // alone (in no cache map), read in place; host_data[i] = the slot's bytes.
    std::vector<int32_t> host_slots;
    std::vector<const void*> host_data;
    // With layer groups, host_slots and host_data in the order they moved, and per group the
    // bytes of its own, in position order.
    std::vector<std::vector<const void*>> group_host_data;
    std::vector<BlockId> table;      // device blocks, in position order, after the host ones
    std::vector<BlockHash> hashes;   // keys of the first hashes.size() full blocks
    int64_t matched[kNumTiers] = {};  // the blocks MatchPrefix found per tier (UnmatchPrefix)
  };

  explicit KvCacheManager(const KvCacheOptions& options, Backend* backend);
  // The landing function of every transfer (kv_cache_landing.cc).
  void Land(Transfers::Landed& landed);
  // A default-namespace chain when the caller gave none.
  BlockChain Chain(std::span<const int32_t> tokens, BlockKeyChain* keys, std::optional<BlockKeyChain>* own) const;
  // A block just cached on the device: into the cache (its own reference) and queued to
  // every tier below.
  void CacheOnDevice(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens, bool computed);
  // Returns one reference of a device block; a cached block left with only the cache's
  // becomes evictable (LRU at its key's priority).
  void ReleaseDeviceBlock(BlockId block);
  // n device blocks to write (the caller checked num_available_device_blocks): free ones
  // first, then LRU unreferenced cached blocks, evicted down the tiers (those with no copy
  // below are copied there before this returns). Blocks a copy in flight still reads are
  // waited for (stall counted).
  std::vector<BlockId> AllocateDeviceBlocks(int64_t n);
  // A device victim (readable until CopyVictimsDown returns): counted, and added to `dirty`
  // unless a tier below holds a copy or there is none (dropped).
  void NoteDeviceVictim(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens,
                        std::vector<DirtyVictim>* dirty);
  // Copies victims to the first tier of slots with room (landed before this returns); the
  // rest are dropped.
  void CopyVictimsDown(std::vector<DirtyVictim> dirty);
  // Layer groups (kv_cache_grouped_prefix.cc). The group entries the pool evicted, copied
  // down under their group's key (GroupBlockKey); called after every grouped call that
  // takes blocks, before they are written.
  void DemoteGroupEntries();
  // Load or recompute with layer groups (kv_cache_grouped_load_plan.cc): ProbeSlowPrefix,
  // LoadPrefixAhead (after its landing) and ProbeLoadFrontier (after its checks).
  SlowPrefix ProbeSlowGroupedPrefix(SequenceId seq, const BlockChain& chain);
  int64_t LoadGroupedPrefixAhead(const BlockChain& chain, int64_t from, int64_t to);
  LoadFrontier ProbeGroupedLoadFrontier(const BlockChain& chain, int64_t from, int64_t to);
  // A load plan's frontier over blocks [from, to) (ProbeLoadFrontier's fields), from
  // whether block b has landed and whether one of its copies is loading in a tier.
  LoadFrontier FrontierOf(int64_t from, int64_t to, const std::function<bool(int64_t)>& landed,
                          const std::function<bool(int64_t, const LowerTier&)>& loading);
  // MoveOldBlocksToHost with layer groups (kv_cache_streaming.cc).
  absl::StatusOr<int64_t> MoveOldGroupBlocksToHost(SequenceId seq, int64_t device_blocks_wanted);
  // Copies device block `block` into the sequence's own new host slot; the slot, or nullopt
  // when the host tier has none free, or the backend's error (the slot freed again).
  absl::StatusOr<std::optional<int32_t>> CopyToOwnHostSlot(BlockId block);
  // Group entries just computed (GroupedBlockTables::CacheFullBlocks), queued to the remote
  // tier under their group's key as CacheOnDevice queues a computed block; the tiers of
  // slots take them when the device evicts them.
  void QueueGroupEntries(std::span<const BlockId> blocks);
  // Fork with layer groups (kv_cache_fork.cc).
  absl::Status ForkGroups(SequenceId parent, SequenceId child, int64_t num_tokens);
  // MatchPrefix with layer groups: the longest prefix whose blocks the next query reads are
  // each cached in every group, on the device or in a tier below (loaded into new entries).
  int64_t MatchGroupedPrefix(SequenceId seq, const BlockChain& chain, int64_t max_blocks, bool landed_only);
  // ReadAhead with layer groups: in each group, the blocks a match of the whole chain reads
  // (from the group's first live block at its end) that only a slow tier holds.
  bool ReadGroupsAhead(const BlockChain& chain, int64_t started[kNumTiers]);
  // Read-ahead and a load plan's loads: from block `from` of the chain up to `to`, the
  // blocks the first tier that has them holds only slowly, each tier starting its own.
  // Whether one of them is (now) on its way into memory; `started`: the reads started per tier.
  bool ReadChainAhead(const BlockChain& chain, int64_t from, int64_t to, const ReadAheadOptions& options,
                      int64_t started[kNumTiers]);
  // The first tier below where the block is not absent, and its presence there.
  std::pair<LowerTier*, LowerTier::Presence> FirstHolder(const BlockHash& hash) const;
  // Swaps (kv_cache_swap.cc). The device blocks SwapOut moves, in slot order.
  std::vector<BlockId> BlocksToSwapOut(SequenceId seq) const;
  Sha256Digest SwapTag(SequenceId seq, uint64_t generation, size_t index) const;
  bool SwapHoldsDiskSlot(SequenceId seq, uint64_t generation, size_t index, int32_t disk_slot) const;
  void SettleSwap(SequenceId seq);
  bool ReadSwapAhead(SequenceId seq);
  void LandSwapCopy(const SwapOutCopy& copy, int64_t batch, const absl::Status& status);
  void LandSwapWrite(const SwapWriteJob& job, const absl::Status& status);
  void LandSwapRead(const SwapReadJob& job, const absl::Status& status);
  // Integrity (kv_cache_integrity.cc): the slots of a tier below, each held by exactly its
  // holders; the staging and write-behind buffers, each free or held once.
  absl::Status VerifySlotTier(Tier tier) const;
  absl::Status VerifyBuffers() const;

  KvContext ctx_;
  const uint64_t instance_tag_;    // random: keys SwapTag to this manager
  const BlockHash default_scope_;  // the default namespace's key scope
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RemoteTier> remote_;  // null without a remote tier
  std::vector<LowerTier*> below_;       // host, disk, remote (when on), fastest first
  std::vector<SlotTier*> slot_tiers_;   // host, disk
  absl::flat_hash_map<SequenceId, SequenceBlocks> sequences_;
  absl::flat_hash_map<SequenceId, SwapState> swapped_;
  uint64_t swap_generation_ = 0;
  // Pinned prefix blocks: key -> device block, each holding one reference of the pin.
  absl::flat_hash_map<BlockHash, BlockId> pinned_;
  // Layer groups (KvCacheOptions::layer_groups): every sequence's tables, over a pool of
  // their own of device_blocks ids (the device tier's pool then stays unused).
  std::optional<GroupedBlockTables> grouped_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_KV_CACHE_MANAGER_H_
