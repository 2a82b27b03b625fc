// GroupedBlockTables: one block pool per layer group (kv_layer_groups.h) and every
// sequence's block table in each; a windowed group's blocks go back to its pool as soon as
// no future query of the sequence reads them, while the full-attention group keeps all.
// Metadata only (ids and reference counts), like BlockPool: the bytes live with whoever
// owns each group's region. Not thread-safe: driven under the engine lock.
//
// Invariant: a sequence's table in group g covers logical blocks [first_block, first_block
// + blocks.size()), every id referenced once by it; blocks before first_block were returned
// (or never allocated: a sequence can reserve past what it has computed, never before its
// window). Every group's table ends at the same logical block.
#ifndef KVTIER_KV_GROUPED_BLOCK_TABLES_H_
#define KVTIER_KV_GROUPED_BLOCK_TABLES_H_

#include <cstdint>
#include <optional>
#include <span>
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

struct GroupBlockStats {
  int64_t layers = 0;
  std::optional<int64_t> window;
  int64_t capacity_blocks = 0;
  int64_t used_blocks = 0;
  int64_t peak_blocks = 0;
};

struct GroupedBlockStats {
  std::vector<GroupBlockStats> groups;  // by group
  // Layer-blocks the tables hold now, and what the same positions would hold with every
  // layer kept (the saving is the difference).
  int64_t held_layer_blocks = 0;
  int64_t full_attention_layer_blocks = 0;
  // Blocks returned to their group's pool because they left the window (cumulative).
  int64_t blocks_dropped_for_window = 0;
};

// Splits `layer_blocks` (a budget in layer-blocks) among the groups in proportion to what
// one sequence of `num_tokens` computed `chunk_tokens` a step holds at its peak, so that
// every group runs out together when such sequences fill the pools.
std::vector<int64_t> SplitLayerBlockBudget(const KvLayerGroups& groups, int64_t layer_blocks, int64_t num_tokens,
                                           int64_t chunk_tokens);

class GroupedBlockTables {
 public:
  // `blocks_per_group[g]`: group g's pool. InvalidArgument when the sizes do not match the
  // groups or one is negative.
  static absl::StatusOr<GroupedBlockTables> Create(KvLayerGroups groups, std::span<const int64_t> blocks_per_group);

  const KvLayerGroups& groups() const { return groups_; }
  // Blocks each group must still allocate for the sequence to hold [0, num_tokens).
  std::vector<int64_t> NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const;
  // Whether every group has that many free blocks.
  bool CanReserve(SequenceId seq, int64_t num_tokens) const;
  // Grows every group's table to cover [0, num_tokens), a windowed group starting at the
  // window of the sequence's next query. All or nothing: ResourceExhausted naming the group
  // short of blocks, nothing changed.
  absl::Status Reserve(SequenceId seq, int64_t num_tokens);
  // Records that [0, num_computed) is computed (it never goes back, except through Release
  // and recomputing from 0): returns to their pools the windowed groups' blocks no query at
  // num_computed or later reads. Returns the blocks returned.
  int64_t OnComputed(SequenceId seq, int64_t num_computed);
  // Returns every block the sequence holds.
  void Release(SequenceId seq);
  // The sequence's table in group g (empty for an unknown sequence).
  const GroupBlockTable& Table(SequenceId seq, int64_t g) const;
  int64_t num_free(int64_t g) const { return pools_[static_cast<size_t>(g)].num_free(); }

  GroupedBlockStats Stats() const;
  // The invariant above and every pool's; Internal error naming the first violation.
  absl::Status VerifyIntegrity() const;

 private:
  struct SequenceTables {
    int64_t num_computed = 0;
    std::vector<GroupBlockTable> tables;  // by group
  };

  GroupedBlockTables(KvLayerGroups groups, std::span<const int64_t> blocks_per_group);

  KvLayerGroups groups_;
  std::vector<BlockPool> pools_;  // by group
  absl::flat_hash_map<SequenceId, SequenceTables> sequences_;
  int64_t blocks_dropped_for_window_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_KV_GROUPED_BLOCK_TABLES_H_
