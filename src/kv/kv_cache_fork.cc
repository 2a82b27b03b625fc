// KvCacheManager::Fork (kv_cache_manager.h): a sequence started on another's computed
// blocks, for the completions of one prompt (parallel sampling).
#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

absl::Status KvCacheManager::Fork(SequenceId parent, SequenceId child, int64_t num_tokens) {
  if (sequences_.contains(child) || swapped_.contains(child)) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", child, " already holds KV blocks"));
  }
  if (grouped_) return ForkGroups(parent, child, num_tokens);
  auto it = sequences_.find(parent);
  if (it != sequences_.end() && !it->second.host_slots.empty()) {
    // Its host-resident blocks are its own (kv_cache_streaming.cc): the child computes them.
    return absl::ResourceExhaustedError(
        absl::StrCat("sequence ", parent, " keeps blocks on the host tier; a fork cannot share them"));
  }
  const int64_t needed = BlocksForTokens(num_tokens);
  if (it == sequences_.end() || static_cast<int64_t>(it->second.table.size()) < needed || num_tokens < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", parent, " does not hold the blocks of ", num_tokens, " positions"));
  }
  const int64_t full = num_tokens / block_tokens();
  std::optional<BlockId> copy;
  if (full < needed) {
    // The parent's blocks are referenced, so never the victims of this allocation.
    if (num_available_device_blocks() < 1) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no device block to copy sequence ", parent, "'s partial block into"));
    }
    const BlockId partial = it->second.table[static_cast<size_t>(full)];
    copy = AllocateDeviceBlocks(1).front();
    const absl::Status copied = ctx_.backend->CopyBlock(partial, *copy);
    if (!copied.ok()) {
      ctx_.device.pool().Release(*copy);
      return copied;
    }
  }
  SequenceBlocks blocks;
  const SequenceBlocks& from = sequences_.at(parent);  // (the allocation may have moved it)
  for (int64_t i = 0; i < full; ++i) {
    const BlockId block = from.table[static_cast<size_t>(i)];
    ctx_.device.pool().AddRef(block);
    blocks.table.push_back(block);
  }
  if (copy) blocks.table.push_back(*copy);
  const size_t hashed = std::min(from.hashes.size(), static_cast<size_t>(full));
  blocks.hashes.assign(from.hashes.begin(), from.hashes.begin() + static_cast<std::ptrdiff_t>(hashed));
  sequences_.emplace(child, std::move(blocks));
  ++ctx_.counters.forks;
  ctx_.counters.fork_shared_blocks += full;
  ctx_.counters.fork_copied_blocks += copy ? 1 : 0;
  return absl::OkStatus();
}

absl::Status KvCacheManager::ForkGroups(SequenceId parent, SequenceId child, int64_t num_tokens) {
  const absl::StatusOr<std::vector<std::pair<BlockId, BlockId>>> copies = grouped_->Fork(parent, child, num_tokens);
  if (!copies.ok()) return copies.status();
  DemoteGroupEntries();  // before the copies write over the evicted entries' blocks
  for (const auto& [from, to] : *copies) {
    if (const absl::Status copied = ctx_.backend->CopyBlock(from, to); !copied.ok()) {
      grouped_->Release(child);
      return copied;
    }
  }
  const int64_t copied = static_cast<int64_t>(copies->size());
  ++ctx_.counters.forks;
  ctx_.counters.fork_shared_blocks += grouped_->groups().ComputedBlocksHeld(num_tokens) - copied;
  ctx_.counters.fork_copied_blocks += copied;
  return absl::OkStatus();
}

}  // namespace kvtier
