// KvCacheManager, part 2 (kv_cache_manager.h): handing out device blocks for writing, and
// the asynchronous device -> host copies — swap-out batches, write-back of cached blocks
// ahead of eviction — with what happens when each lands, and the host -> disk write-back
// on the I/O thread (DiskIoThread). Sequence operations and invariants are in
// kv_cache_manager.cc. Swapped blocks staged for disk, and device victims the host cannot
// take (DemoteToDisk), are written on the I/O thread too (FinishBatch submits,
// LandDiskJob lands, kv_cache_disk_jobs.cc).
#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "backend/backend.h"
#include "kv/kv_cache_manager.h"
#include "storage/disk_block_store.h"

namespace kvtier {

// ---------------------------------------------------------------- device allocation

std::vector<BlockId> KvCacheManager::AllocateDeviceBlocks(int64_t n) {
  FinishCopies(0);
  std::vector<BlockId> blocks;
  std::vector<DirtyVictim> dirty;
  int64_t wait_ticket = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::optional<BlockId> id = pool(Tier::kDevice).Allocate();
    if (!id) {
      std::optional<int32_t> victim = lru(Tier::kDevice).PopFront();
      if (!victim) break;  // callers check num_available_device_blocks first
      // A write-back of the victim still in flight lands first: then it needs no copy.
      if (auto r = copies_.reading_ticket.find(*victim); r != copies_.reading_ticket.end()) FinishCopies(r->second);
      const BlockHash hash = state(Tier::kDevice).hash_of.at(*victim);
      ++counters_.blocks_demoted[static_cast<int>(Tier::kDevice)];
      if (HasLowerCopy(hash)) {
        // Already one tier down (written back ahead, or demoted before): nothing to copy.
      } else if (pool(Tier::kHost).num_blocks() > 0 || pool(Tier::kDisk).num_blocks() > 0) {
        dirty.push_back({*victim, hash, PriorityOf(hash)});
      } else {
        ++counters_.blocks_dropped;
      }
      DropCached(Tier::kDevice, *victim);
      pool(Tier::kDevice).Release(*victim);  // the cache's reference: the block is free now
      id = pool(Tier::kDevice).Allocate();   // the victim itself (the free queue was empty)
    }
    // Freed while an async copy (a swap-out) still reads it: FIFO reuse makes that the last
    // resort, and the wait then covers only the small first batches of the swap-out.
    if (auto r = copies_.reading_ticket.find(*id); r != copies_.reading_ticket.end()) wait_ticket = std::max(wait_ticket, r->second);
    blocks.push_back(*id);
  }
  if (wait_ticket > 0) FinishCopies(wait_ticket);
  // Victims are copied before this returns: the caller's forward may overwrite them.
  if (!dirty.empty()) DemoteDirtyDeviceBlocks(dirty);
  return blocks;
}

void KvCacheManager::DemoteDirtyDeviceBlocks(const std::vector<DirtyVictim>& victims) {
  counters_.evictions_copied += static_cast<int64_t>(victims.size());
  std::vector<PendingCopy> to_host;
  std::vector<DirtyVictim> to_disk;
  for (const DirtyVictim& v : victims) {
    std::optional<int32_t> slot = AllocateSlot(Tier::kHost);
    if (!slot) {
      to_disk.push_back(v);
      continue;
    }
    copies_.writeback_slots[*slot] = 0;
    PendingCopy c;
    c.kind = PendingKind::kCacheToHost;
    c.block = v.block;
    c.slot = *slot;
    c.hash = v.hash;
    c.priority = v.priority;
    c.evicted = true;
    to_host.push_back(c);
  }
  if (!to_host.empty()) {
    const std::vector<PendingCopy> copies = to_host;
    absl::StatusOr<int64_t> ticket = StartBatch(to_host);
    if (ticket.ok()) {
      FinishCopies(*ticket);  // lands them in the host cache (or counts them dropped)
    } else {
      for (const PendingCopy& c : copies) {
        copies_.writeback_slots.erase(c.slot);
        pool(Tier::kHost).Release(c.slot);
        to_disk.push_back({c.block, c.hash, c.priority});
      }
    }
  }
  DemoteToDisk(to_disk);
}

void KvCacheManager::DemoteToDisk(const std::vector<DirtyVictim>& victims) {
  // Batches of device -> staging copies, each waited for (the caller may overwrite the
  // device blocks once AllocateDeviceBlocks returns); landing one submits its disk writes
  // (FinishBatch). A batch ends when the staging buffers run out: the next victim's buffer
  // is then the oldest write's, once it lands.
  std::vector<PendingCopy> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    const std::vector<PendingCopy> copies = batch;
    absl::StatusOr<int64_t> ticket = StartBatch(std::move(batch));
    batch.clear();
    if (ticket.ok()) {
      FinishCopies(*ticket);
      return;
    }
    for (const PendingCopy& c : copies) {
      staging_.free.push_back(c.staging);
      pool(Tier::kDisk).Release(c.slot);
      ++counters_.io_errors;
      ++counters_.blocks_dropped;
    }
  };
  for (const DirtyVictim& v : victims) {
    if (pool(Tier::kDisk).num_blocks() == 0) {
      ++counters_.blocks_dropped;
      continue;
    }
    // On disk already, or on its way there (evicted before, recomputed since): no second copy.
    if (state(Tier::kDisk).by_hash.contains(v.hash) || disk_tier_.jobs->DemoteWriteOf(v.hash)) continue;
    if (staging_.free.empty()) flush();
    // The buffer first: waiting for a write may free disk slots too.
    const std::optional<int32_t> staging = AcquireStaging();
    const std::optional<int32_t> disk_slot = staging ? AllocateSlot(Tier::kDisk) : std::nullopt;
    if (!disk_slot) {  // every disk slot is held (swaps, writes in flight)
      if (staging) staging_.free.push_back(*staging);
      ++counters_.blocks_dropped;
      continue;
    }
    PendingCopy c;
    c.kind = PendingKind::kDemoteToDisk;
    c.block = v.block;
    c.slot = *disk_slot;
    c.staging = *staging;
    c.hash = v.hash;
    c.priority = v.priority;
    batch.push_back(c);
  }
  flush();
}

std::optional<int32_t> KvCacheManager::AcquireStaging() {
  // Landing the oldest copies writes their staged blocks to disk (or frees the buffers).
  while (staging_.free.empty() && !copies_.batches.empty()) FinishCopies(copies_.batches.front().ticket);
  // Or the oldest disk write still holding its buffer (the writer finishes in order).
  while (staging_.free.empty() && disk_tier_.jobs != nullptr) {
    std::optional<DiskJobId> oldest;
    auto older = [&](DiskJobId id) {
      if (!oldest || id.seq < oldest->seq) oldest = id;
    };
    disk_tier_.jobs->ForEach<SwapWriteJob>([&](DiskJobId id, const SwapWriteJob&) { older(id); });
    disk_tier_.jobs->ForEach<DemoteWriteJob>([&](DiskJobId id, const DemoteWriteJob&) { older(id); });
    if (!oldest) break;
    AwaitDiskJob(oldest);
  }
  if (staging_.free.empty()) return std::nullopt;
  const int32_t staging = staging_.free.back();
  staging_.free.pop_back();
  return staging;
}

// ---------------------------------------------------------------- async device -> host

absl::StatusOr<int64_t> KvCacheManager::StartBatch(std::vector<PendingCopy> copies) {
  std::vector<BlockCopy> blocks;
  blocks.reserve(copies.size());
  for (const PendingCopy& c : copies) {
    blocks.push_back({c.block, c.staging >= 0 ? Staging(c.staging) : HostSlot(c.slot)});
  }
  absl::StatusOr<int64_t> ticket;
  {
    // Host time only (enqueueing, on backends with copy engines); the cost model's
    // bandwidth is what the host pays per byte, which is what it weighs against recompute.
    const auto start = std::chrono::steady_clock::now();
    ticket = backend_->StartCopiesToHost(blocks);
    counters_.copy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (!ticket.ok()) return ticket.status();
  counters_.swap_bytes_timed += static_cast<int64_t>(copies.size() * block_bytes_);
  ++counters_.async_copy_batches;
  for (const PendingCopy& c : copies) {
    copies_.reading_ticket[c.block] = *ticket;
    if (c.kind == PendingKind::kCacheToHost) copies_.writeback_slots[c.slot] = *ticket;
  }
  copies_.batches.push_back({*ticket, std::move(copies)});
  return *ticket;
}

void KvCacheManager::FinishCopies(int64_t wait_ticket) {
  if (wait_ticket > 0 && !copies_.batches.empty() && copies_.batches.front().ticket <= wait_ticket) {
    const auto start = std::chrono::steady_clock::now();
    const absl::Status waited = backend_->WaitForCopies(wait_ticket);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    counters_.copy_seconds += seconds;
    counters_.copy_stall_seconds += seconds;
    while (!copies_.batches.empty() && copies_.batches.front().ticket <= wait_ticket) {
      const PendingBatch batch = std::move(copies_.batches.front());
      copies_.batches.pop_front();
      FinishBatch(batch, waited);
    }
  }
  while (!copies_.batches.empty()) {
    const absl::StatusOr<bool> done = backend_->CopiesDone(copies_.batches.front().ticket);
    if (done.ok() && !*done) break;
    const PendingBatch batch = std::move(copies_.batches.front());
    copies_.batches.pop_front();
    FinishBatch(batch, done.status());
  }
}

void KvCacheManager::FinishBatch(const PendingBatch& batch, const absl::Status& copied) {
  for (const PendingCopy& c : batch.copies) {
    if (auto r = copies_.reading_ticket.find(c.block); r != copies_.reading_ticket.end() && r->second <= batch.ticket) {
      copies_.reading_ticket.erase(r);
    }
    if (c.kind == PendingKind::kDemoteToDisk) {
      if (copied.ok()) {
        // Staged: the I/O thread writes it; until then the slot is in no cache map.
        disk_tier_.jobs->SubmitWrite(DemoteWriteJob{c.slot, c.staging, c.hash, c.priority}, c.slot, c.hash.value,
                                     static_cast<int32_t>(options_.block_tokens), Staging(c.staging));
      } else {
        staging_.free.push_back(c.staging);
        pool(Tier::kDisk).Release(c.slot);
        ++counters_.io_errors;
        ++counters_.blocks_dropped;
      }
      continue;
    }
    if (c.kind == PendingKind::kCacheToHost) {
      copies_.writeback_slots.erase(c.slot);
      TierState& host = state(Tier::kHost);
      if (copied.ok() && !host.by_hash.contains(c.hash)) {
        RaisePriority(c.hash, c.priority);
        host.by_hash[c.hash] = c.slot;
        host.hash_of[c.slot] = c.hash;
        lru(Tier::kHost).PushBack(c.slot, PriorityOf(c.hash));
        if (!c.evicted) ++counters_.blocks_written_back;
      } else {
        pool(Tier::kHost).Release(c.slot);
        if (!copied.ok() && c.evicted) ++counters_.blocks_dropped;
      }
      continue;
    }
    // A swap: only if the sequence still holds this swap-out (a release frees the slots at
    // once; its late copies are then ignored, and FIFO copies keep reused host slots right).
    auto it = swapped_.find(c.seq);
    if (it != swapped_.end() && it->second.generation == c.generation) {
      SwapState& swap = it->second;
      if (!copied.ok() && swap.failed.ok()) swap.failed = copied;
      if (copied.ok() && swap.failed.ok() && c.kind == PendingKind::kSwapToDisk) {
        // Staged: the I/O thread writes it; the buffer is free again when the write lands.
        disk_tier_.jobs->SubmitWrite(SwapWriteJob{c.seq, c.generation, c.index, c.slot, c.staging}, c.slot,
                                     SwapTag(c.seq, c.generation, c.index), static_cast<int32_t>(options_.block_tokens),
                                     Staging(c.staging));
        if (swap.last_ticket <= batch.ticket) swap.last_ticket = 0;
        continue;
      }
      if (swap.last_ticket <= batch.ticket) swap.last_ticket = 0;
    }
    if (c.staging >= 0) staging_.free.push_back(c.staging);
  }
}

int64_t KvCacheManager::WriteBackBudget() const {
  // Per step: enough to keep ahead of the blocks a step caches or evicts (a full-budget
  // prefill step caches max_tokens_per_step / block_tokens), small enough that one batch
  // of host copies fits inside a forward (blocks of an 8B model are megabytes each).
  return std::max<int64_t>(64, pool(Tier::kDevice).num_blocks() / 8);
}

void KvCacheManager::StartBackgroundCopies() {
  AdmitPreparedSlots();
  FinishCopies(0);
  LandDiskJobs();
  if (pool(Tier::kHost).num_blocks() == 0 || !options_.prefix_cache) return;
  const int64_t budget = WriteBackBudget();
  int64_t taken = 0;
  // Two batches: the coldest unreferenced blocks (the next victims: their batch lands first,
  // so an early eviction waits for it only), then blocks cached since earlier calls that
  // running sequences still hold: immutable too, and the victims once their sequence
  // finishes. Host work stays O(budget + newly cached blocks) per step.
  std::vector<PendingCopy> cold, held;
  absl::flat_hash_set<BlockId> chosen;
  auto consider = [&](BlockId block, std::vector<PendingCopy>* out) {
    auto h = state(Tier::kDevice).hash_of.find(block);
    if (h == state(Tier::kDevice).hash_of.end() || HasLowerCopy(h->second) || copies_.reading_ticket.contains(block) ||
        !chosen.insert(block).second) {
      return;
    }
    PendingCopy c;
    c.kind = PendingKind::kCacheToHost;
    c.block = block;
    c.hash = h->second;
    c.priority = PriorityOf(h->second);
    out->push_back(c);
    ++taken;
  };
  int64_t examined = 0;  // the next `budget` victims, clean or not
  lru(Tier::kDevice).ForEachInEvictionOrder([&](int32_t block) {
    if (examined++ >= budget) return false;
    consider(block, &cold);
    return true;
  });
  while (taken < budget && !writeback_queue_.empty()) {
    const auto [block, hash] = writeback_queue_.front();
    writeback_queue_.pop_front();
    auto h = state(Tier::kDevice).hash_of.find(block);
    if (h != state(Tier::kDevice).hash_of.end() && h->second == hash) consider(block, &held);
  }
  for (std::vector<PendingCopy>* batch : {&cold, &held}) {
    size_t n = 0;
    for (; n < batch->size(); ++n) {
      // May demote a host LRU entry to disk, as the eviction of this block would later.
      std::optional<int32_t> slot = AllocateSlot(Tier::kHost);
      if (!slot) break;
      (*batch)[n].slot = *slot;
      copies_.writeback_slots[*slot] = 0;
    }
    batch->resize(n);
    if (batch->empty()) continue;
    const std::vector<PendingCopy> copies = *batch;
    if (!StartBatch(std::move(*batch)).ok()) {
      for (const PendingCopy& c : copies) {
        copies_.writeback_slots.erase(c.slot);
        pool(Tier::kHost).Release(c.slot);
      }
      break;
    }
  }
  FinishCopies(0);  // synchronous backends: landed already
  // After the host slots above were taken: the host LRU now starts with the next victims.
  StartDiskWriteBack();
}

// ---------------------------------------------------------------- host -> disk (I/O thread)

void KvCacheManager::StartDiskWriteBack() {
  if (disk_tier_.jobs == nullptr) return;
  // Which host blocks: the `target` coldest cached ones (the victims of the next `target`
  // host allocations beyond the free slots) should be on disk or on their way there. A
  // step takes up to WriteBackBudget() host slots for device write-back, plus swap-outs, so
  // twice that keeps the I/O thread busy across a step while evictions find their blocks
  // written. Nothing is written while the host tier has that many free slots: writing
  // blocks that may never be evicted would only take disk slots (and evict disk entries).
  // The queue is bounded by the same number (and half the disk tier), so a slow disk
  // makes evictions wait for one job at a time instead of queueing unboundedly.
  // A failed write pauses write-back for a while: a full or failing disk is not hammered
  // every step (evictions meanwhile write synchronously, as without the I/O thread).
  if (disk_tier_.write_pause_steps > 0) {
    --disk_tier_.write_pause_steps;
    return;
  }
  const int64_t target = 2 * WriteBackBudget();
  const int64_t victims = target - pool(Tier::kHost).num_free();
  if (victims <= 0) return;
  const int64_t max_in_flight = std::max<int64_t>(1, std::min<int64_t>(target, pool(Tier::kDisk).num_blocks() / 2));
  std::vector<int32_t> to_write;
  int64_t examined = 0;
  int64_t room = max_in_flight - disk_tier_.jobs->Count<WriteBackJob>();
  lru(Tier::kHost).ForEachInEvictionOrder([&](int32_t slot) {
    if (examined++ >= victims || room <= 0) return false;
    if (disk_tier_.jobs->WriteBackOfHostSlot(slot) ||
        state(Tier::kDisk).by_hash.contains(state(Tier::kHost).hash_of.at(slot))) {
      return true;
    }
    to_write.push_back(slot);
    --room;
    return true;
  });
  for (int32_t host_slot : to_write) {
    // May drop the disk LRU entry, as this block's eviction from the host would later.
    std::optional<int32_t> disk_slot = AllocateSlot(Tier::kDisk);
    if (!disk_slot) break;  // every disk slot is held (swaps, writes in flight)
    const BlockHash hash = state(Tier::kHost).hash_of.at(host_slot);
    disk_tier_.jobs->SubmitWrite(WriteBackJob{*disk_slot, host_slot, hash}, *disk_slot, hash.value,
                                 static_cast<int32_t>(options_.block_tokens), HostSlot(host_slot));
  }
}

}  // namespace kvtier
