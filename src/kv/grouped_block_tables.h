// GroupedBlockTables: every sequence's block table in each layer group (kv_layer_groups.h),
// all drawing on one pool of equal blocks; a windowed group's blocks go back to the pool as
// soon as no future query of the sequence reads them, while a full-attention group keeps
// all. Metadata only (ids and reference counts), like BlockPool: the bytes live with whoever
// owns the pool's region. Not thread-safe: driven under the engine lock.
//
// Why one pool: groups of equal layer counts have equal blocks, so the blocks a window
// frees serve any group of any sequence, with no split of the budget to guess (a split
// strands memory when short sequences hold mostly full-attention blocks).
//
// Prefix entries (grouped_block_tables_prefix.cc): with the prefix cache on, each computed
// full block of each group is kept under the chain key of its logical block and its group,
// so a windowed group's blocks that left the window stay reusable until evicted; a new
// sequence reuses a cached prefix only if every block its next query reads is cached in
// every group (KvLayerGroups::UsablePrefixBlocks). An evicted entry is handed to the owner
// (TakeEvicted), which copies it to the tiers below; a match there comes back through
// AddEntry (KvCacheManager, kv_cache_grouped_prefix.cc).
//
// Long sequences (MoveFrontToHost): a full-attention group's oldest computed blocks may
// move to host slots the owner holds, read there in place; the table then starts after them.
//
// Invariant: a sequence's table in group g covers logical blocks [first_block, first_block
// + blocks.size()), each id referenced by the tables holding it plus one reference when it
// is a prefix entry; an entry no table holds is in the eviction order. The blocks before
// first_block were returned, and none that a query at the sequence's computed length reads
// except the host_blocks right before first_block, which are host-resident, full and computed.
// Every group's table ends at the same logical block, at or after the computed positions.
#ifndef KVTIER_KV_GROUPED_BLOCK_TABLES_H_
#define KVTIER_KV_GROUPED_BLOCK_TABLES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include <functional>
#include <span>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/kv_layer_groups.h"
#include "kv/lru_set.h"
#include "kv/tier.h"

namespace kvtier {

// One group's table for one sequence: blocks[i] holds logical block first_block + i.
struct GroupBlockTable {
  int64_t first_block = 0;
  std::vector<BlockId> blocks;
  // Logical blocks [first_block - host_blocks, first_block) live in host slots the owner
  // holds (MoveFrontToHost).
  int64_t host_blocks = 0;
};

struct GroupedBlockStats {
  int64_t capacity_blocks = 0;
  int64_t used_blocks = 0;  // held by a table (prefix entries no table holds are not used)
  int64_t peak_blocks = 0;
  std::vector<int64_t> group_blocks;  // (num_groups) blocks each group's tables hold
  // What the same positions would hold with every layer kept (the saving is the difference
  // from used_blocks).
  int64_t full_attention_blocks = 0;
  // Blocks returned to the pool because they left a window (cumulative).
  int64_t blocks_dropped_for_window = 0;
  int64_t cached_blocks = 0;  // prefix entries, held by a table or evictable
};

class GroupedBlockTables {
 public:
  // A pool of `num_blocks` blocks of groups.layers_per_group() layers. InvalidArgument for
  // a negative size.
  static absl::StatusOr<GroupedBlockTables> Create(KvLayerGroups groups, int64_t num_blocks);

  const KvLayerGroups& groups() const { return groups_; }
  // Free blocks plus prefix entries no table holds (evicted on demand).
  int64_t num_free() const { return pool_.num_free() + evictable_.size(); }
  // Blocks the groups must still allocate, together, for the sequence to hold [0, num_tokens).
  int64_t NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const;
  // Grows every group's table to cover [0, num_tokens). All or nothing: ResourceExhausted
  // with the numbers, nothing changed, when the pool has too few free blocks.
  absl::Status Reserve(SequenceId seq, int64_t num_tokens);
  // Swap-in: gives a sequence holding nothing the tables of one that has computed
  // [0, num_computed), each windowed group's only from its first live block (what a
  // swap-out carried: KeptBlocks). ResourceExhausted, nothing changed, when too few blocks
  // are free; FailedPrecondition when the sequence holds blocks; InvalidArgument for a
  // negative num_computed.
  absl::Status Restore(SequenceId seq, int64_t num_computed);
  // What a swap-out of the sequence carries (none with host-resident blocks, which the
  // owner swaps out no further: it recomputes such a sequence): group by group, in position order, the blocks
  // [FirstLiveBlock(g, n), BlocksForTokens(n)) of a sequence that has computed [0, n) —
  // KvLayerGroups::ComputedBlocksHeld(n) ids. The blocks reserved past n hold nothing yet.
  // After Restore(seq, n), the blocks that came back, in the same order.
  std::vector<BlockId> KeptBlocks(SequenceId seq) const;
  // The positions the sequence has computed (0 when it holds nothing).
  int64_t NumComputed(SequenceId seq) const;
  // Records that [0, num_computed) is computed (it never goes back, except through Release
  // and recomputing from 0): returns to the pool the windowed groups' blocks no query at
  // num_computed or later reads. Returns the blocks returned.
  int64_t OnComputed(SequenceId seq, int64_t num_computed);
  // Parallel sampling: gives `child` (holding nothing) the tables of `parent` for positions
  // [0, num_tokens), which the parent has computed: in each group the full blocks from the
  // first live block at num_tokens shared, the partial last block (if any) a new block of
  // its own. Returns (parent's block, child's block) for each partial block, whose bytes
  // the owner copies. FailedPrecondition when the child holds blocks or the parent does not
  // hold every block a query at num_tokens reads (its windows went past); ResourceExhausted
  // when too few blocks are free for the copies; nothing changed on an error.
  absl::StatusOr<std::vector<std::pair<BlockId, BlockId>>> Fork(SequenceId parent, SequenceId child,
                                                                int64_t num_tokens);
  // Long sequences (kv_cache_streaming.cc): group g's first block, whose bytes the owner
  // has copied into a host slot, leaves the table (first_block and host_blocks advance) and
  // goes back to the pool as a dropped one does. FailedPrecondition unless g is a
  // full-attention group whose first block is full and computed.
  absl::Status MoveFrontToHost(SequenceId seq, int64_t g);
  // Returns every block the sequence holds.
  void Release(SequenceId seq);
  // The sequence's table in group g (empty for an unknown sequence or group).
  const GroupBlockTable& Table(SequenceId seq, int64_t g) const;

  // ---- Prefix entries (grouped_block_tables_prefix.cc). `key(i)` is the chain key of
  // logical block i, `tokens` the sequence's tokens (block i's are compared on a hit).
  // Makes the sequence's full blocks [0, num_full) prefix entries, each group's block
  // where its table still holds it (call before OnComputed drops them); an entry already
  // cached under the same key and group is kept. Returns the blocks that became entries.
  std::vector<BlockId> CacheFullBlocks(SequenceId seq, int64_t num_full, const std::function<BlockHash(int64_t)>& key,
                       std::span<const int32_t> tokens);
  // For a sequence holding nothing, or only its computed full blocks [0, held) (a load
  // plan's computed front, HeldComputedBlocks): the longest prefix of at most max_blocks
  // blocks, past held, whose blocks its next query reads are all cached (with these tokens)
  // or its own becomes its tables, shared with the entries, computed up to there; its own
  // blocks the windows have passed go back. Returns the blocks matched (0: none).
  int64_t MatchPrefix(SequenceId seq, int64_t max_blocks, const std::function<BlockHash(int64_t)>& key,
                      std::span<const int32_t> tokens);
  // The blocks [0, held) of a sequence that has computed exactly those and holds nothing
  // past them, which a match continues (0 when it holds nothing); -1 when it holds a block
  // not full or not computed, or host-resident ones.
  int64_t HeldComputedBlocks(SequenceId seq) const;

  // Pinned prefixes: keeps every cached entry a match of the first num_blocks blocks reads
  // (each group's blocks a query at num_blocks x block_tokens reads) from eviction until
  // UnpinAll, one reference each, as a table holds them. Idempotent per entry; returns the
  // entries newly pinned.
  int64_t PinPrefix(int64_t num_blocks, const std::function<BlockHash(int64_t)>& key,
                    std::span<const int32_t> tokens);
  void UnpinAll();
  int64_t num_pinned() const { return static_cast<int64_t>(pinned_.size()); }

  // A prefix entry: the chain key of its logical block, its group and its tokens.
  struct PrefixEntry {
    BlockHash key;
    int64_t group = 0;
    std::vector<int32_t> tokens;
  };
  // The entry `block` holds now; nullptr when it is none.
  const PrefixEntry* EntryAt(BlockId block) const {
    auto it = entry_of_block_.find(block);
    return it == entry_of_block_.end() ? nullptr : &it->second;
  }
  // The entry of (key, group) when cached with `tokens`.
  std::optional<BlockId> FindEntry(const BlockHash& key, int64_t group, std::span<const int32_t> tokens) const;
  // Whether an entry of (key, group) is cached, with any tokens.
  bool CachesKey(const BlockHash& key, int64_t group) const { return entries_.contains(EntryKey{key, group}); }

  // ---- Entries of the tiers below (the owner moves their bytes).
  // An entry evicted to free its block: the block (its bytes intact until the block is next
  // written), key, group and tokens.
  struct EvictedEntry {
    BlockId block = 0;
    BlockHash key;
    int64_t group = 0;
    std::vector<int32_t> tokens;
  };
  // The entries evicted (by Reserve, Restore, AddEntry) since the last call, oldest first.
  // The owner takes them after each of those calls, before the blocks are written.
  std::vector<EvictedEntry> TakeEvicted();
  // Keeps an entry from eviction until Unhold (a match bringing the others in): a reference
  // beyond the invariant's, returned before the owner's call ends.
  void Hold(BlockId block);
  void Unhold(BlockId block);
  // A new entry of (key, group) with `tokens` in a block taken from the pool (evicting, when
  // none is free, the least recently released entry), held until Unhold while the owner
  // fills its bytes. The caller checked num_free() > 0 and that CachesKey is false.
  BlockId AddEntry(const BlockHash& key, int64_t group, std::span<const int32_t> tokens);
  // Forgets an entry AddEntry returned, still held, whose bytes could not be filled: its
  // block is free again.
  void DropEntry(BlockId block);

  GroupedBlockStats Stats() const;
  // The invariant above and the pool's; Internal error naming the first violation.
  absl::Status VerifyIntegrity() const;

 private:
  struct SequenceTables {
    int64_t num_computed = 0;
    int64_t num_cached = 0;  // its full blocks [0, num_cached) were offered as prefix entries
    std::vector<GroupBlockTable> tables;  // by group
  };
  using EntryKey = std::pair<BlockHash, int64_t>;  // (chain key, group)

  // A block to write: a free one, else the least recently used entry no table holds,
  // evicted. The caller checked num_free().
  BlockId TakeBlock();
  // Returns a table's reference; an entry left with only its own becomes evictable.
  void Unref(BlockId block);
  absl::Status VerifyEntries(const absl::flat_hash_map<BlockId, int64_t>& table_refs) const;

  GroupedBlockTables(KvLayerGroups groups, int64_t num_blocks) : groups_(std::move(groups)), pool_(num_blocks) {}

  KvLayerGroups groups_;
  BlockPool pool_;
  absl::flat_hash_map<SequenceId, SequenceTables> sequences_;
  int64_t blocks_dropped_for_window_ = 0;
  absl::flat_hash_map<EntryKey, BlockId> entries_;
  absl::flat_hash_map<BlockId, PrefixEntry> entry_of_block_;
  LruSet evictable_;  // entries no table or pin holds, least recently released first
  absl::flat_hash_set<BlockId> pinned_;  // entries PinPrefix holds
  std::vector<EvictedEntry> evicted_;  // since the last TakeEvicted
};

}  // namespace kvtier

#endif  // KVTIER_KV_GROUPED_BLOCK_TABLES_H_
