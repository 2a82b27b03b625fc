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
// Invariant: a sequence's table in group g covers logical blocks [first_block, first_block
// + blocks.size()), every id referenced once, by it alone; the blocks before first_block
// were returned, and none that a query at the sequence's computed length reads. Every
// group's table ends at the same logical block.
#ifndef KVTIER_KV_GROUPED_BLOCK_TABLES_H_
#define KVTIER_KV_GROUPED_BLOCK_TABLES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_pool.h"
#include "kv/kv_layer_groups.h"
#include "kv/tier.h"

namespace kvtier {

// One group's table for one sequence: blocks[i] holds logical block first_block + i.
struct GroupBlockTable {
  int64_t first_block = 0;
  std::vector<BlockId> blocks;
};

struct GroupedBlockStats {
  int64_t capacity_blocks = 0;
  int64_t used_blocks = 0;
  int64_t peak_blocks = 0;
  std::vector<int64_t> group_blocks;  // (num_groups) blocks each group's tables hold
  // What the same positions would hold with every layer kept (the saving is the difference
  // from used_blocks).
  int64_t full_attention_blocks = 0;
  // Blocks returned to the pool because they left a window (cumulative).
  int64_t blocks_dropped_for_window = 0;
};

class GroupedBlockTables {
 public:
  // A pool of `num_blocks` blocks of groups.layers_per_group() layers. InvalidArgument for
  // a negative size.
  static absl::StatusOr<GroupedBlockTables> Create(KvLayerGroups groups, int64_t num_blocks);

  const KvLayerGroups& groups() const { return groups_; }
  int64_t num_free() const { return pool_.num_free(); }
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
  // What a swap-out of the sequence carries: group by group, in position order, the blocks
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
  // Returns every block the sequence holds.
  void Release(SequenceId seq);
  // The sequence's table in group g (empty for an unknown sequence or group).
  const GroupBlockTable& Table(SequenceId seq, int64_t g) const;

  GroupedBlockStats Stats() const;
  // The invariant above and the pool's; Internal error naming the first violation.
  absl::Status VerifyIntegrity() const;

 private:
  struct SequenceTables {
    int64_t num_computed = 0;
    std::vector<GroupBlockTable> tables;  // by group
  };

  GroupedBlockTables(KvLayerGroups groups, int64_t num_blocks) : groups_(std::move(groups)), pool_(num_blocks) {}

  KvLayerGroups groups_;
  BlockPool pool_;
  absl::flat_hash_map<SequenceId, SequenceTables> sequences_;
  int64_t blocks_dropped_for_window_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_KV_GROUPED_BLOCK_TABLES_H_
