// KvCacheManager's long sequences (the contract is in kv_cache_manager.h; the policy in
// docs/LONG_CONTEXT.md): a sequence longer than the device tier moves its oldest computed
// blocks to host slots of its own as its recent ones fill, and the forward reads them from
// the host in place (HostResidentKv). Those slots are private — in no cache map, never
// evicted — until the sequence is released; their blocks were cached on the device before
// they moved, so the prefix cache keeps them (evicted down the tiers like any block). With
// layer groups the full-attention groups' blocks move, each group's read through its own
// table (GroupedBlockTables::MoveFrontToHost).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/copy_timer.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

absl::StatusOr<std::optional<int32_t>> KvCacheManager::CopyToOwnHostSlot(BlockId block) {
  const std::optional<int32_t> slot = host_->TakeSlot();
  if (!slot) return std::nullopt;
  // Synchronous copies go behind the async ones on a copy engine (KvContext::DrainCopies).
  ctx_.DrainCopies();
  absl::Status copied;
  {
    CopyTimer timer(&ctx_.counters.copy_seconds);
    ctx_.counters.swap_bytes_timed += static_cast<int64_t>(ctx_.block_bytes);
    const BlockCopy copy{block, host_->bytes(*slot)};
    copied = ctx_.backend->CopyBlocksToHost(std::span<const BlockCopy>(&copy, 1));
  }
  if (!copied.ok()) {
    host_->cache().pool().Release(*slot);
    return copied;
  }
  ++ctx_.counters.blocks_moved_to_host;
  return slot;
}

absl::StatusOr<int64_t> KvCacheManager::MoveOldBlocksToHost(SequenceId seq, int64_t num_computed,
                                                            int64_t device_blocks_wanted) {
  auto it = sequences_.find(seq);
  if (grouped_ && !swapped_.contains(seq)) return MoveOldGroupBlocksToHost(seq, device_blocks_wanted);
  if (it == sequences_.end() || swapped_.contains(seq)) return 0;
  SequenceBlocks& blocks = it->second;
  // Logical blocks [0, computed_blocks) are full and computed: never written again.
  const int64_t computed_blocks = num_computed / block_tokens();
  int64_t moved = 0;
  while (num_available_device_blocks() < device_blocks_wanted && !blocks.table.empty() &&
         static_cast<int64_t>(blocks.host_slots.size()) < computed_blocks) {
    const BlockId block = blocks.table.front();
    ASSIGN_OR_RETURN(const std::optional<int32_t> slot, CopyToOwnHostSlot(block));
    if (!slot) break;
    blocks.table.erase(blocks.table.begin());
    blocks.host_slots.push_back(*slot);
    blocks.host_data.push_back(host_->bytes(*slot));
    ReleaseDeviceBlock(block);  // free, or an evictable cache entry, unless shared
    ++moved;
  }
  return moved;
}

absl::StatusOr<int64_t> KvCacheManager::MoveOldGroupBlocksToHost(SequenceId seq, int64_t device_blocks_wanted) {
  const KvLayerGroups& groups = grouped_->groups();
  // Blocks [0, computed_blocks) are full and computed: never written again. Only the
  // full-attention groups move theirs: a windowed group holds no more than its window.
  const int64_t computed_blocks = grouped_->NumComputed(seq) / block_tokens();
  int64_t moved = 0;
  while (num_available_device_blocks() < device_blocks_wanted) {
    int64_t next = -1;  // the full-attention group with the fewest blocks moved that can move one
    for (int64_t g = 0; g < groups.num_groups(); ++g) {
      const GroupBlockTable& t = grouped_->Table(seq, g);
      if (groups.group(g).window.has_value() || t.blocks.empty() || t.first_block >= computed_blocks) continue;
      if (next < 0 || t.first_block < grouped_->Table(seq, next).first_block) next = g;
    }
    if (next < 0) break;
    ASSIGN_OR_RETURN(const std::optional<int32_t> slot, CopyToOwnHostSlot(grouped_->Table(seq, next).blocks.front()));
    if (!slot) break;
    RETURN_IF_ERROR(grouped_->MoveFrontToHost(seq, next));
    SequenceBlocks& blocks = sequences_[seq];
    blocks.host_slots.push_back(*slot);
    blocks.host_data.push_back(host_->bytes(*slot));
    blocks.group_host_data.resize(static_cast<size_t>(groups.num_groups()));
    blocks.group_host_data[static_cast<size_t>(next)].push_back(host_->bytes(*slot));
    ++moved;
  }
  return moved;
}

HostResidentKv KvCacheManager::HostResident(SequenceId seq, int64_t group) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return {};
  if (!grouped_) return HostResidentKv{0, it->second.host_data};
  const std::vector<std::vector<const void*>>& by_group = it->second.group_host_data;
  if (group < 0 || group >= static_cast<int64_t>(by_group.size())) return {};
  return HostResidentKv{0, by_group[static_cast<size_t>(group)]};
}

}  // namespace kvtier
