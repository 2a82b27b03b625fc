// KvCacheManager's swaps (the contract is in kv_cache_manager.h): a preempted sequence's
// device blocks copied out to host slots (disk slots when the host is full) in batches
// that land while the forward runs, and brought back — from host slots, read-ahead ones
// included, and from disk through staging buffers — when it resumes.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "kv/copy_timer.h"
#include "kv/kv_cache_manager.h"
#include "model/stable_hash.h"

namespace kvtier {

// Disk slots of swapped (uncached) blocks carry a tag instead of a content hash, so a slot
// read back is still checked to be the one written: by this manager (sequence ids restart
// at 1 in every context), for this swap-out of the sequence, as this block.
Sha256Digest KvCacheManager::SwapTag(SequenceId seq, uint64_t generation, size_t index) const {
  Sha256 h;
  h.Update("kvtier swap tag", 16);
  h.UpdateU64(instance_tag_).UpdateU64(static_cast<uint64_t>(seq)).UpdateU64(generation).UpdateU64(index);
  return h.Finish();
}

absl::Status KvCacheManager::SwapOut(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || it->second.table.empty()) return absl::OkStatus();
  FinishCopies(0);
  const std::vector<BlockId> table = it->second.table;
  std::vector<SlotRef> slots;
  auto release_slots = [&] {
    for (const SlotRef& ref : slots) pool(ref.tier).Release(ref.slot);
  };
  for (size_t i = 0; i < table.size(); ++i) {
    if (std::optional<int32_t> host_slot = AllocateSlot(Tier::kHost)) {
      slots.push_back({Tier::kHost, *host_slot});
    } else if (std::optional<int32_t> disk_slot = AllocateSlot(Tier::kDisk)) {
      slots.push_back({Tier::kDisk, *disk_slot});
    } else {
      release_slots();
      return absl::ResourceExhaustedError(absl::StrCat("no host or disk room to swap out sequence ", seq));
    }
  }
  const uint64_t generation = ++swap_generation_;
  swapped_[seq] = SwapState{slots, generation, 0, absl::OkStatus()};
  // Batches of 2, 4, 8, ... blocks, in the order the pool hands the blocks out again: first
  // those that become free (uncached: the back of the free queue), then cached ones (the
  // back of the device LRU, in table order), then blocks other sequences still share. The
  // preempting sequence, which takes blocks at once, then waits only for the first small
  // batch; the rest lands while the forward runs.
  std::vector<size_t> order;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < table.size(); ++i) {
      const bool cached = state(Tier::kDevice).hash_of.contains(table[i]);
      const int32_t others = pool(Tier::kDevice).ref_count(table[i]) - 1 - (cached ? 1 : 0);
      const int rank = others > 0 ? 2 : (cached ? 1 : 0);
      if (rank == pass) order.push_back(i);
    }
  }
  std::vector<PendingCopy> batch;
  size_t batch_size = 2;
  absl::Status status;
  auto flush = [&] {
    if (batch.empty() || !status.ok()) return;
    std::vector<PendingCopy> copies = std::move(batch);
    batch.clear();
    std::vector<int32_t> staging;
    for (const PendingCopy& c : copies) {
      if (c.staging >= 0) staging.push_back(c.staging);
    }
    absl::StatusOr<int64_t> ticket = StartBatch(std::move(copies));
    if (!ticket.ok()) {
      status = ticket.status();
      staging_.free.insert(staging_.free.end(), staging.begin(), staging.end());
      return;
    }
    swapped_.at(seq).last_ticket = *ticket;
  };
  for (size_t i : order) {
    if (!status.ok()) break;
    PendingCopy c;
    c.kind = slots[i].tier == Tier::kHost ? PendingKind::kSwapToHost : PendingKind::kSwapToDisk;
    c.block = table[i];
    c.slot = slots[i].slot;
    c.seq = seq;
    c.generation = generation;
    c.index = i;
    if (c.kind == PendingKind::kSwapToDisk) {
      if (staging_.free.empty()) flush();  // its buffers come back as its writes land
      const std::optional<int32_t> staging = AcquireStaging();
      if (!staging) {
        status = absl::InternalError("kv cache: no staging buffer for a disk swap");
        break;
      }
      c.staging = *staging;
    }
    batch.push_back(c);
    if (batch.size() >= batch_size) {
      flush();
      batch_size *= 2;
    }
  }
  flush();
  if (!status.ok()) {
    // Nothing is lost: the device blocks are kept. Copies already started still read them
    // (fenced by copies_.reading_ticket) and are ignored when they land.
    for (const PendingCopy& c : batch) {
      if (c.staging >= 0) staging_.free.push_back(c.staging);
    }
    swapped_.erase(seq);
    release_slots();
    return status;
  }
  ++counters_.swaps_out;
  counters_.swap_out_bytes += static_cast<int64_t>(table.size() * block_bytes_);
  for (BlockId block : table) {
    ReleaseDeviceBlock(block);
  }
  sequences_.at(seq).table.clear();
  FinishCopies(0);  // synchronous backends: everything has landed (disk writes happen now)
  return absl::OkStatus();
}

absl::Status KvCacheManager::WaitForPrefetches() { return backend_->WaitForPrefetches(); }

absl::Status KvCacheManager::SwapIn(SequenceId seq, bool prefetch) {
  if (!swapped_.contains(seq)) return absl::OkStatus();
  SettleSwap(seq);
  auto it = swapped_.find(seq);
  if (!it->second.failed.ok()) {
    const absl::Status failed = it->second.failed;
    Release(seq);
    return failed;
  }
  const std::vector<SlotRef>& slots = it->second.slots;
  if (static_cast<int64_t>(slots.size()) > num_available_device_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", seq, " needs ", slots.size(),
                                                     " device blocks to swap in"));
  }
  SequenceBlocks& blocks = sequences_[seq];
  const std::vector<BlockId> got = AllocateDeviceBlocks(static_cast<int64_t>(slots.size()));
  blocks.table.insert(blocks.table.end(), got.begin(), got.end());
  std::vector<BlockCopy> host_copies;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].tier == Tier::kHost) host_copies.push_back({blocks.table[i], HostSlot(slots[i].slot)});
  }
  if (!prefetch) DrainCopies();
  absl::Status status;
  {
    CopyTimer timer(&counters_.copy_seconds);
    counters_.swap_bytes_timed += static_cast<int64_t>(host_copies.size() * block_bytes_);
    status = prefetch ? backend_->PrefetchBlocksFromHost(host_copies) : backend_->CopyBlocksFromHost(host_copies);
  }
  if (prefetch) ++counters_.prefetches;
  std::vector<StagedRead> reads;  // the blocks nobody read ahead
  for (size_t i = 0; i < slots.size() && status.ok(); ++i) {
    if (slots[i].tier == Tier::kDisk) {
      reads.push_back({slots[i].slot, SwapTag(seq, it->second.generation, i), {}, blocks.table[i]});
    }
  }
  for (const absl::Status& read : ReadDiskBlocksToDevice(reads)) {
    if (!read.ok()) {
      status = read;
      break;
    }
  }
  ++counters_.swaps_in;
  counters_.swap_in_bytes += static_cast<int64_t>(slots.size() * block_bytes_);
  if (!status.ok()) {
    // The swapped copy cannot be trusted: drop everything; the caller recomputes.
    Release(seq);
    return status;
  }
  for (const SlotRef& ref : slots) pool(ref.tier).Release(ref.slot);
  swapped_.erase(it);
  return absl::OkStatus();
}

bool KvCacheManager::SwapHoldsDiskSlot(SequenceId seq, uint64_t generation, size_t index,
                                       int32_t disk_slot) const {
  auto it = swapped_.find(seq);
  if (it == swapped_.end() || it->second.generation != generation) return false;
  const std::vector<SlotRef>& slots = it->second.slots;
  return index < slots.size() && slots[index].tier == Tier::kDisk && slots[index].slot == disk_slot;
}

void KvCacheManager::SettleSwap(SequenceId seq) {
  // Its swap-out copies first (normally landed a step ago): landing them submits its disk
  // writes.
  if (const int64_t ticket = swapped_.at(seq).last_ticket; ticket != 0) FinishCopies(ticket);
  if (disk_tier_.jobs == nullptr) return;
  // Then the newest write and read-ahead on its disk slots (each thread finishes in order).
  std::optional<DiskJobId> last_write, last_read;
  for (const SlotRef& ref : swapped_.at(seq).slots) {
    if (ref.tier != Tier::kDisk) continue;
    for (auto [job, last] : {std::pair{disk_tier_.jobs->SwapWriteOnSlot(ref.slot), &last_write},
                             std::pair{disk_tier_.jobs->ReadOnSlot(ref.slot), &last_read}}) {
      if (job && (!*last || (*last)->seq < job->seq)) *last = job;
    }
  }
  AwaitDiskJob(last_write);
  AwaitDiskJob(last_read);
}

}  // namespace kvtier
