// KvCacheManager's disk -> host read-ahead on an I/O thread (the contract is at the top of
// kv_cache_manager.h): what is read ahead, how finished reads land, and how a step that
// needs a block still being read waits for it.
#include <algorithm>
#include <chrono>
#include <optional>

#include "kv/kv_cache_manager.h"
#include "storage/disk_block_store.h"

namespace kvtier {

bool KvCacheManager::ReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys) {
  if (disk_tier_.jobs == nullptr || pool(Tier::kHost).num_blocks() == 0) return false;
  // Landed reads are host copies (and free read budget): a waiting sequence whose prefix
  // reads have finished is admitted this step, not the next.
  LandDiskJobs(DiskThreads::kReader);
  DiskJobs& jobs = *disk_tier_.jobs;
  // Per call one write-back budget of blocks; in flight at most a quarter of the host tier,
  // so read-ahead never displaces most of what the host caches.
  int64_t budget = std::min<int64_t>(WriteBackBudget(),
                                     pool(Tier::kHost).num_blocks() / 4 - num_disk_reads_in_flight());
  auto take_host = [&]() -> std::optional<int32_t> {
    if (budget <= 0) return std::nullopt;
    std::optional<int32_t> slot = AllocateSlot(Tier::kHost);
    if (slot) --budget;
    return slot;
  };

  if (auto it = swapped_.find(seq); it != swapped_.end()) {
    // Only once the swap-out has landed: its disk blocks are written when its copies land.
    if (it->second.last_ticket != 0 || !it->second.failed.ok()) return false;
    // The blocks to read, taken first: a host slot's eviction below changes no swap.
    const uint64_t generation = it->second.generation;
    std::vector<std::pair<size_t, int32_t>> to_read;  // (block index, disk slot)
    for (size_t i = 0; i < it->second.slots.size(); ++i) {
      const SlotRef ref = it->second.slots[i];
      // Not already being read, and written (a write in flight lands first).
      if (ref.tier == Tier::kDisk && !jobs.ReadOnSlot(ref.slot) && !jobs.SwapWriteOnSlot(ref.slot)) {
        to_read.emplace_back(i, ref.slot);
      }
    }
    for (const auto& [index, disk_slot] : to_read) {
      const std::optional<int32_t> host_slot = take_host();
      if (!host_slot) break;
      jobs.SubmitRead(SwapReadJob{disk_slot, *host_slot, seq, generation, index}, disk_slot,
                      SwapTag(seq, generation, index), {}, HostSlot(*host_slot));
    }
    return false;
  }

  // Prefix blocks, for a sequence that holds none yet: the chain up to the first block not
  // cached anywhere (as MatchPrefix walks it). A block still being written to disk since its
  // device eviction ends the chain here: MatchPrefix waits for that write.
  if (!options_.prefix_cache || tokens.size() < 2) return false;
  if (auto held = sequences_.find(seq); held != sequences_.end() && (!held->second.table.empty() || !held->second.host_slots.empty())) {
    return false;
  }
  bool reading = false;  // some block of the chain is being read
  std::optional<BlockKeyChain> own_keys;
  if (keys == nullptr) keys = &own_keys.emplace(default_scope_);
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const BlockHash hash = keys->Key(tokens, options_.block_tokens, i);
    if (jobs.PrefixReadOf(hash)) {
      reading = true;
      continue;
    }
    if (state(Tier::kDevice).by_hash.contains(hash) || state(Tier::kHost).by_hash.contains(hash)) continue;
    if (!state(Tier::kDisk).by_hash.contains(hash)) return reading;
    const std::optional<int32_t> host_slot = take_host();
    if (!host_slot) return reading;
    auto on_disk = state(Tier::kDisk).by_hash.find(hash);  // the host eviction may have dropped it
    if (on_disk == state(Tier::kDisk).by_hash.end()) {
      pool(Tier::kHost).Release(*host_slot);
      return reading;
    }
    const int32_t disk_slot = on_disk->second;
    lru(Tier::kDisk).Erase(disk_slot);  // neither evicted nor reused while read
    // The host slot is the read's alone until it lands: its tokens are those the read checks.
    const std::span<const int32_t> block_tokens = BlockTokens(tokens, i);
    SetStoredTokens(Tier::kHost, *host_slot, block_tokens);
    jobs.SubmitRead(PrefixReadJob{disk_slot, *host_slot, hash}, disk_slot, hash.digest, block_tokens,
                    HostSlot(*host_slot));
    reading = true;
  }
  return reading;
}

}  // namespace kvtier
