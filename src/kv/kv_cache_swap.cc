// KvCacheManager's swaps (the contract is in kv_cache_manager.h): a preempted sequence's
// device blocks copied out to the tiers with slots — host slots first, then disk slots —
// in batches that land while the forward runs, read ahead from disk into host slots while
// it waits, and brought back when it resumes.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/copy_timer.h"
#include "kv/kv_cache_manager.h"
#include "model/stable_hash.h"

namespace kvtier {

// Disk slots of swapped (uncached) blocks carry a tag instead of a content key, so a slot
// read back is still checked to be the one written: by this manager (sequence ids restart
// at 1 in every context), for this swap-out of the sequence, as this block.
Sha256Digest KvCacheManager::SwapTag(SequenceId seq, uint64_t generation, size_t index) const {
  Sha256 h;
  h.Update("kvtier swap tag", 16);
  h.UpdateU64(instance_tag_).UpdateU64(static_cast<uint64_t>(seq)).UpdateU64(generation).UpdateU64(index);
  return h.Finish();
}

std::vector<BlockId> KvCacheManager::BlocksToSwapOut(SequenceId seq) const {
  if (grouped_) return grouped_->KeptBlocks(seq);
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? std::vector<BlockId>{} : it->second.table;
}

absl::Status KvCacheManager::SwapOut(SequenceId seq) {
  // With layer groups only the blocks a query can still read travel (KeptBlocks: a
  // windowed group's dropped blocks are neither written nor read back), in the order
  // GroupedBlockTables::Restore gives them back.
  // A grouped long sequence's host-resident blocks stay in no swap record: it recomputes.
  if (auto held = sequences_.find(seq); grouped_ && held != sequences_.end() && !held->second.host_slots.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " holds host-resident group blocks"));
  }
  const std::vector<BlockId> table = BlocksToSwapOut(seq);
  const int64_t grouped_computed = grouped_ ? grouped_->NumComputed(seq) : 0;
  if (grouped_ && static_cast<int64_t>(table.size()) != grouped_->groups().ComputedBlocksHeld(grouped_computed)) {
    return absl::InternalError(absl::StrCat("sequence ", seq, " holds ", table.size(), " of the ",
                                            grouped_->groups().ComputedBlocksHeld(grouped_computed),
                                            " group blocks its computed positions need"));
  }
  if (table.empty()) {
    // Nothing computed to keep (a grouped sequence may hold reserved blocks): it starts over.
    if (grouped_) grouped_->Release(seq);
    return absl::OkStatus();
  }
  Transfers& transfers = ctx_.transfers;
  transfers.Land(LaneBit(Lane::kCopy));
  std::vector<SlotRef> slots;
  auto release_slots = [&] {
    for (const SlotRef& ref : slots) (ref.tier == Tier::kHost ? host_->cache() : disk_->cache()).pool().Release(ref.slot);
  };
  for (size_t i = 0; i < table.size(); ++i) {
    std::optional<SlotRef> slot;
    for (SlotTier* tier : slot_tiers_) {
      if (const std::optional<int32_t> s = tier->TakeSlot()) {
        slot = SlotRef{tier->tier(), *s};
        break;
      }
    }
    if (!slot) {
      release_slots();
      return absl::ResourceExhaustedError(absl::StrCat("no host or disk room to swap out sequence ", seq));
    }
    slots.push_back(*slot);
  }
  const uint64_t generation = ++swap_generation_;
  swapped_[seq] = SwapState{slots, generation, 0, absl::OkStatus(), grouped_computed};
  // Batches of 2, 4, 8, ... blocks, in the order the pool hands the blocks out again: first
  // those that become free (uncached: the back of the free queue), then cached ones (the
  // back of the device LRU, in table order), then blocks other sequences still share. The
  // preempting sequence, which takes blocks at once, then waits only for the first small
  // batch; the rest lands while the forward runs.
  std::vector<size_t> order;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < table.size(); ++i) {
      if (grouped_) {  // its own pool: nothing cached, nothing shared
        if (pass == 0) order.push_back(i);
        continue;
      }
      const bool cached = ctx_.device.IsCached(table[i]);
      const int32_t others = ctx_.device.pool().ref_count(table[i]) - 1 - (cached ? 1 : 0);
      const int rank = others > 0 ? 2 : (cached ? 1 : 0);
      if (rank == pass) order.push_back(i);
    }
  }
  std::vector<Transfers::Copy> batch;
  size_t batch_size = 2;
  absl::Status status;
  auto release_staging = [&](const std::vector<Transfers::Copy>& copies) {
    for (const Transfers::Copy& c : copies) {
      const int32_t staging = std::get<SwapOutCopy>(c.transfer).staging;
      if (staging >= 0) disk_->ReleaseStaging(staging);
    }
  };
  auto flush = [&] {
    if (batch.empty() || !status.ok()) return;
    std::vector<Transfers::Copy> copies = std::move(batch);
    batch.clear();
    const std::vector<Transfers::Copy> started = copies;
    const absl::StatusOr<int64_t> batch_id = transfers.StartCopies(std::move(copies));
    if (!batch_id.ok()) {
      status = batch_id.status();
      release_staging(started);
      return;
    }
    swapped_.at(seq).last_batch = *batch_id;
  };
  for (size_t i : order) {
    if (!status.ok()) break;
    SwapOutCopy c{table[i], seq, generation, i, slots[i], -1};
    uint8_t* destination = nullptr;
    if (slots[i].tier == Tier::kHost) {
      destination = host_->bytes(slots[i].slot);
    } else {
      if (disk_->staging_buffers().free.empty()) flush();  // its buffers come back as its writes land
      const std::optional<int32_t> staging = disk_->AcquireStaging();
      if (!staging) {
        status = absl::InternalError("kv cache: no staging buffer for a disk swap");
        break;
      }
      c.staging = *staging;
      destination = disk_->staging(*staging);
    }
    batch.push_back({c, table[i], destination});
    if (batch.size() >= batch_size) {
      flush();
      batch_size *= 2;
    }
  }
  flush();
  if (!status.ok()) {
    // Nothing is lost: the device blocks are kept. Copies already started still read them
    // (fenced until they land) and are ignored when they land.
    release_staging(batch);
    swapped_.erase(seq);
    release_slots();
    return status;
  }
  ++ctx_.counters.swaps_out;
  ctx_.counters.swap_out_bytes += static_cast<int64_t>(table.size() * ctx_.block_bytes);
  if (grouped_) {
    // The group pool hands its blocks out with no fence for copies in flight: the copies
    // land before the blocks go back.
    if (const int64_t batch = swapped_.at(seq).last_batch; batch != 0) transfers.Await(Transfers::CopyBatch(batch));
    grouped_->Release(seq);
  } else {
    for (BlockId block : table) ReleaseDeviceBlock(block);
    sequences_.at(seq).table.clear();
  }
  transfers.Land(LaneBit(Lane::kCopy));  // synchronous backends: everything has landed (disk writes happen now)
  return absl::OkStatus();
}

absl::Status KvCacheManager::SwapIn(SequenceId seq, bool prefetch) {
  if (!swapped_.contains(seq)) return absl::OkStatus();
  SettleSwap(seq);
  auto it = swapped_.find(seq);
  if (!it->second.failed.ok()) {
    const absl::Status failed = it->second.failed;
    Release(seq);
    return failed;
  }
  const std::vector<SlotRef> slots = it->second.slots;
  const uint64_t generation = it->second.generation;
  if (static_cast<int64_t>(slots.size()) > num_available_device_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sequence ", seq, " needs ", slots.size(), " device blocks to swap in"));
  }
  // The device blocks the slots land in, slots[i] in targets[i].
  std::vector<BlockId> targets;
  if (grouped_) {
    // The tables rebuilt from the computed positions alone: the same groups, first blocks
    // and lengths as at the swap-out, so KeptBlocks lists the new ids in the slots' order.
    RETURN_IF_ERROR(grouped_->Restore(seq, it->second.grouped_computed));
    DemoteGroupEntries();  // before the copies below overwrite the evicted entries' blocks
    targets = grouped_->KeptBlocks(seq);
    if (targets.size() != slots.size()) {
      Release(seq);
      return absl::InternalError(absl::StrCat("sequence ", seq, " swapped ", slots.size(),
                                              " group blocks out and gets ", targets.size(), " back"));
    }
  } else {
    std::vector<BlockId>& table = sequences_[seq].table;
    const std::vector<BlockId> got = AllocateDeviceBlocks(static_cast<int64_t>(slots.size()));
    table.insert(table.end(), got.begin(), got.end());
    targets = table;
  }
  std::vector<BlockCopy> host_copies;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].tier == Tier::kHost) host_copies.push_back({targets[i], host_->bytes(slots[i].slot)});
  }
  if (!prefetch) ctx_.DrainCopies();
  absl::Status status;
  {
    CopyTimer timer(&ctx_.counters.copy_seconds);
    ctx_.counters.swap_bytes_timed += static_cast<int64_t>(host_copies.size() * ctx_.block_bytes);
    status = prefetch ? ctx_.backend->PrefetchBlocksFromHost(host_copies) : ctx_.backend->CopyBlocksFromHost(host_copies);
  }
  if (prefetch) ++ctx_.counters.prefetches;
  std::vector<DiskTier::StagedRead> reads;  // the blocks nobody read ahead
  for (size_t i = 0; i < slots.size() && status.ok(); ++i) {
    if (slots[i].tier == Tier::kDisk) {
      reads.push_back({slots[i].slot, SwapTag(seq, generation, i), {}, targets[i]});
    }
  }
  for (const absl::Status& read : disk_->ReadToDevice(reads)) {
    if (!read.ok()) {
      status = read;
      break;
    }
  }
  ++ctx_.counters.swaps_in;
  ctx_.counters.swap_in_bytes += static_cast<int64_t>(slots.size() * ctx_.block_bytes);
  if (!status.ok()) {
    // The swapped copy cannot be trusted: drop everything; the caller recomputes.
    Release(seq);
    return status;
  }
  for (const SlotRef& ref : slots) (ref.tier == Tier::kHost ? host_->cache() : disk_->cache()).pool().Release(ref.slot);
  swapped_.erase(seq);
  return absl::OkStatus();
}

bool KvCacheManager::SwapHoldsDiskSlot(SequenceId seq, uint64_t generation, size_t index, int32_t disk_slot) const {
  auto it = swapped_.find(seq);
  if (it == swapped_.end() || it->second.generation != generation) return false;
  const std::vector<SlotRef>& slots = it->second.slots;
  return index < slots.size() && slots[index].tier == Tier::kDisk && slots[index].slot == disk_slot;
}

void KvCacheManager::SettleSwap(SequenceId seq) {
  Transfers& transfers = ctx_.transfers;
  // Its swap-out copies first (normally landed a step ago): landing them submits its disk
  // writes.
  if (const int64_t batch = swapped_.at(seq).last_batch; batch != 0) transfers.Await(Transfers::CopyBatch(batch));
  if (!transfers.disk_open()) return;
  // Then the newest write and read-ahead on its disk slots (each lane finishes in order).
  std::optional<TransferId> last_write, last_read;
  for (const SlotRef& ref : swapped_.at(seq).slots) {
    if (ref.tier != Tier::kDisk) continue;
    for (auto [job, last] : {std::pair{transfers.SwapWriteOnSlot(ref.slot), &last_write},
                             std::pair{transfers.ReadOnSlot(ref.slot), &last_read}}) {
      if (job && (!*last || (*last)->seq < job->seq)) *last = job;
    }
  }
  transfers.Await(last_write);
  transfers.Await(last_read);
}

bool KvCacheManager::ReadSwapAhead(SequenceId seq) {
  if (!disk_->on() || !host_->on()) return false;
  const SwapState& swap = swapped_.at(seq);
  // Only once the swap-out has landed: its disk blocks are written when its copies land.
  if (swap.last_batch != 0 || !swap.failed.ok()) return false;
  Transfers& transfers = ctx_.transfers;
  int64_t budget = disk_->ReadAheadBudget();
  // The blocks to read, taken first: a host slot's eviction below changes no swap.
  const uint64_t generation = swap.generation;
  std::vector<std::pair<size_t, int32_t>> to_read;  // (block index, disk slot)
  for (size_t i = 0; i < swap.slots.size(); ++i) {
    const SlotRef ref = swap.slots[i];
    // Not already being read, and written (a write in flight lands first).
    if (ref.tier == Tier::kDisk && !transfers.ReadOnSlot(ref.slot) && !transfers.SwapWriteOnSlot(ref.slot)) {
      to_read.emplace_back(i, ref.slot);
    }
  }
  for (const auto& [index, disk_slot] : to_read) {
    const std::optional<int32_t> host_slot = host_->TakeSlotForRead(&budget);
    if (!host_slot) break;
    transfers.SubmitDiskRead(SwapReadJob{disk_slot, *host_slot, seq, generation, index}, disk_slot,
                             SwapTag(seq, generation, index), {}, host_->bytes(*host_slot));
  }
  return false;
}

// ---------------------------------------------------------------- landing

void KvCacheManager::LandSwapCopy(const SwapOutCopy& copy, int64_t batch, const absl::Status& status) {
  // Only if the sequence still holds this swap-out (a release frees the slots at once; its
  // late copies are then ignored, and FIFO copies keep reused host slots right).
  auto it = swapped_.find(copy.seq);
  if (it != swapped_.end() && it->second.generation == copy.generation) {
    SwapState& swap = it->second;
    if (!status.ok() && swap.failed.ok()) swap.failed = status;
    if (swap.last_batch <= batch) swap.last_batch = 0;
    if (status.ok() && swap.failed.ok() && copy.staging >= 0) {
      // Staged: the writer writes it; the buffer is free again when the write lands.
      ctx_.transfers.SubmitDiskWrite(SwapWriteJob{copy.seq, copy.generation, copy.index, copy.slot.slot, copy.staging},
                                     copy.slot.slot, SwapTag(copy.seq, copy.generation, copy.index), {},
                                     disk_->staging(copy.staging));
      return;
    }
  }
  if (copy.staging >= 0) disk_->ReleaseStaging(copy.staging);
}

void KvCacheManager::LandSwapWrite(const SwapWriteJob& job, const absl::Status& status) {
  disk_->ReleaseStaging(job.staging);
  if (!SwapHoldsDiskSlot(job.seq, job.generation, job.index, job.disk_slot)) {
    disk_->cache().pool().Release(job.disk_slot);  // released meanwhile: the write held the slot
  } else if (status.ok()) {
    ++ctx_.counters.disk.swap_writes;
  } else {
    ++ctx_.counters.io_errors;
    SwapState& swap = swapped_.at(job.seq);
    if (swap.failed.ok()) swap.failed = status;  // SwapIn reports it: recompute
  }
}

void KvCacheManager::LandSwapRead(const SwapReadJob& job, const absl::Status& status) {
  disk_->CountReadFailure(status);
  if (!SwapHoldsDiskSlot(job.seq, job.generation, job.index, job.disk_slot)) {
    // Released meanwhile: the read held the disk slot.
    host_->cache().pool().Release(job.host_slot);
    disk_->cache().pool().Release(job.disk_slot);
    return;
  }
  SwapState& swap = swapped_.at(job.seq);
  if (status.ok()) {
    swap.slots[job.index] = SlotRef{Tier::kHost, job.host_slot};
    disk_->cache().pool().Release(job.disk_slot);
    ++ctx_.counters.disk.read_aheads;
  } else {
    host_->cache().pool().Release(job.host_slot);
    if (swap.failed.ok()) swap.failed = status;  // SwapIn reports it: recompute
  }
}

}  // namespace kvtier
