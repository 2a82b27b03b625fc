// KvCacheManager's long sequences (the contract is in kv_cache_manager.h; the policy in
// docs/LONG_CONTEXT.md): a sequence longer than the device tier moves its oldest computed
// blocks to host slots of its own as its recent ones fill, and the forward reads them from
// the host in place (HostResidentKv). Those slots are private — in no cache map, never
// evicted — until the sequence is released; their blocks were cached on the device before
// they moved, so the prefix cache keeps them (evicted down the tiers like any block).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "kv/copy_timer.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

absl::StatusOr<int64_t> KvCacheManager::MoveOldBlocksToHost(SequenceId seq, int64_t num_computed,
                                                            int64_t device_blocks_wanted) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || swapped_.contains(seq)) return 0;
  SequenceBlocks& blocks = it->second;
  // Logical blocks [0, computed_blocks) are full and computed: never written again.
  const int64_t computed_blocks = num_computed / block_tokens();
  int64_t moved = 0;
  while (num_available_device_blocks() < device_blocks_wanted && !blocks.table.empty() &&
         static_cast<int64_t>(blocks.host_slots.size()) < computed_blocks) {
    const std::optional<int32_t> slot = host_->TakeSlot();
    if (!slot) break;
    const BlockId block = blocks.table.front();
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
    blocks.table.erase(blocks.table.begin());
    blocks.host_slots.push_back(*slot);
    blocks.host_data.push_back(host_->bytes(*slot));
    ReleaseDeviceBlock(block);  // free, or an evictable cache entry, unless shared
    ++ctx_.counters.blocks_moved_to_host;
    ++moved;
  }
  return moved;
}

HostResidentKv KvCacheManager::HostResident(SequenceId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return {};
  return HostResidentKv{0, it->second.host_data};
}

}  // namespace kvtier
