// KvCacheManager's disk -> host read-ahead on an I/O thread (the contract is at the top of
// kv_cache_manager.h): what is read ahead, how finished reads land, and how a step that
// needs a block still being read waits for it.
#include <algorithm>
#include <chrono>
#include <optional>

#include "kv/kv_cache_manager.h"
#include "storage/disk_block_store.h"

namespace kvtier {

bool KvCacheManager::ReadAhead(SequenceId seq, std::span<const int32_t> tokens) {
  if (disk_reader_ == nullptr || host_.num_blocks() == 0) return false;
  LandDiskReads();
  // Per call one write-back budget of blocks; in flight at most a quarter of the host tier,
  // so read-ahead never displaces most of what the host caches.
  int64_t budget = std::min<int64_t>(WriteBackBudget(),
                                     host_.num_blocks() / 4 - static_cast<int64_t>(disk_reads_.size()));
  auto take_host = [&]() -> std::optional<int32_t> {
    if (budget <= 0) return std::nullopt;
    std::optional<int32_t> slot = AllocateHost();
    if (slot) --budget;
    return slot;
  };

  if (auto it = swapped_.find(seq); it != swapped_.end()) {
    // Only once the swap-out has landed: its disk blocks are written when its copies land.
    if (it->second.last_ticket != 0 || !it->second.failed.ok()) return false;
    for (size_t i = 0; i < it->second.slots.size(); ++i) {
      const SlotRef ref = it->second.slots[i];
      if (ref.tier != Tier::kDisk || disk_slot_read_job_.contains(ref.slot) ||
          disk_slot_write_job_.contains(ref.slot)) {
        continue;  // already being read, or not written yet
      }
      const std::optional<int32_t> host_slot = take_host();  // may evict: look `it` up again
      if (!host_slot) return false;
      it = swapped_.find(seq);
      const int64_t job = disk_reader_->SubmitRead(ref.slot, SwapTag(seq, it->second.generation, i), HostSlot(*host_slot));
      DiskRead read;
      read.disk_slot = ref.slot;
      read.host_slot = *host_slot;
      read.swap = true;
      read.seq = seq;
      read.generation = it->second.generation;
      read.index = i;
      disk_reads_[job] = read;
      disk_slot_read_job_[ref.slot] = job;
    }
    return false;
  }

  // Prefix blocks, for a sequence that holds none yet: the chain up to the first block not
  // cached anywhere (as MatchPrefix walks it). A block still being written to disk since its
  // device eviction ends the chain here: MatchPrefix waits for that write.
  if (!options_.prefix_cache || tokens.size() < 2) return false;
  if (auto held = sequences_.find(seq); held != sequences_.end() && !held->second.table.empty()) return false;
  bool reading = false;  // some block of the chain is being read
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / options_.block_tokens;
  std::optional<BlockHash> parent;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const BlockHash hash = PromptBlockHash(parent, tokens, i);
    parent = hash;
    if (prefix_read_job_.contains(hash)) {
      reading = true;
      continue;
    }
    if (cache(Tier::kDevice).by_hash.contains(hash) || cache(Tier::kHost).by_hash.contains(hash)) continue;
    if (!cache(Tier::kDisk).by_hash.contains(hash)) return reading;
    const std::optional<int32_t> host_slot = take_host();
    if (!host_slot) return reading;
    auto on_disk = cache(Tier::kDisk).by_hash.find(hash);  // the host eviction may have dropped it
    if (on_disk == cache(Tier::kDisk).by_hash.end()) {
      host_.Release(*host_slot);
      return reading;
    }
    const int32_t disk_slot = on_disk->second;
    disk_lru_.Erase(disk_slot);  // neither evicted nor reused while read
    const int64_t job = disk_reader_->SubmitRead(disk_slot, hash.value, HostSlot(*host_slot));
    DiskRead read;
    read.disk_slot = disk_slot;
    read.host_slot = *host_slot;
    read.hash = hash;
    disk_reads_[job] = read;
    disk_slot_read_job_[disk_slot] = job;
    prefix_read_job_[hash] = job;
    reading = true;
  }
  return reading;
}

void KvCacheManager::FinishDiskReads(int64_t wait_job) {
  if (disk_reader_ == nullptr || disk_reads_.empty()) return;
  LandDiskReads();
  if (wait_job > 0 && disk_reads_.contains(wait_job)) {
    const auto start = std::chrono::steady_clock::now();
    disk_reader_->Wait(wait_job);
    counters_.disk_read_ahead_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++counters_.disk_read_ahead_waits;
    LandDiskReads();
  }
}

void KvCacheManager::LandDiskReads() {
  for (const DiskIoThread::Finished& done : disk_reader_->TakeFinished()) {
    if (auto staged = staged_read_results_.find(done.job); staged != staged_read_results_.end()) {
      staged->second = done.status;  // ReadDiskBlocksToDevice counts and uses it
      continue;
    }
    auto it = disk_reads_.find(done.job);
    if (it == disk_reads_.end()) continue;
    const DiskRead read = it->second;
    disk_reads_.erase(it);
    disk_slot_read_job_.erase(read.disk_slot);
    if (absl::IsDataLoss(done.status)) ++counters_.corrupt_blocks_detected;
    if (!done.status.ok() && !absl::IsDataLoss(done.status)) ++counters_.io_errors;
    if (read.swap) {
      if (!SwapHoldsDiskSlot(read.seq, read.generation, read.index, read.disk_slot)) {
        // Released meanwhile: the read held the disk slot.
        host_.Release(read.host_slot);
        disk_.Release(read.disk_slot);
        continue;
      }
      SwapState& swap = swapped_.at(read.seq);
      if (done.status.ok()) {
        swap.slots[read.index] = SlotRef{Tier::kHost, read.host_slot};
        disk_.Release(read.disk_slot);
        ++counters_.disk_read_aheads;
      } else {
        host_.Release(read.host_slot);
        if (swap.failed.ok()) swap.failed = done.status;  // SwapIn reports it: recompute
      }
      continue;
    }
    prefix_read_job_.erase(read.hash);
    if (absl::IsDataLoss(done.status)) {  // never used as data: forget the slot
      DropCached(Tier::kDisk, read.disk_slot);
      disk_.Release(read.disk_slot);
    } else {
      disk_lru_.PushBack(read.disk_slot, PriorityOf(read.hash));
    }
    TierCache& host = cache(Tier::kHost);
    if (done.status.ok() && !host.by_hash.contains(read.hash)) {
      host.by_hash[read.hash] = read.host_slot;
      host.hash_of[read.host_slot] = read.hash;
      host_lru_.PushBack(read.host_slot, PriorityOf(read.hash));
      ++counters_.disk_read_aheads;
    } else {
      host_.Release(read.host_slot);
    }
  }
}

}  // namespace kvtier
