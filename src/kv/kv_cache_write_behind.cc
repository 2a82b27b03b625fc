// KvCacheManager's write-behind (the contract is at the top of kv_cache_manager.h): every
// block cached on the device is written to the disk tier soon after, so that a crash keeps
// it, without a step ever waiting for the disk. Stepping thread only.
#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "kv/kv_cache_manager.h"
#include "remote/remote_block_store.h"

namespace kvtier {
namespace {

// Bytes of write-behind writes in flight at most (and blocks, below): what a crash can
// lose beyond the queue, and what the writer has queued ahead of an eviction's write.
constexpr int64_t kWriteBehindBytesInFlight = 64ll << 20;
constexpr int64_t kWriteBehindMaxBlocks = 32;

}  // namespace

void KvCacheManager::QueueWriteBehind(BlockId block, BlockHash hash) {
  if (disk_tier_.jobs == nullptr || write_behind_.buffers.count == 0) return;
  // On disk already (written before; recomputed or hit now): in use again, so its record is
  // renewed at once, or a restart would take it for one of the oldest blocks.
  if (auto on_disk = state(Tier::kDisk).by_hash.find(hash); on_disk != state(Tier::kDisk).by_hash.end()) {
    TouchOnDisk(hash);
    disk_tier_.jobs->SubmitWrite(RenewRecordJob{on_disk->second}, on_disk->second, hash.digest, {}, nullptr);
    return;
  }
  write_behind_.queue.push_back({block, hash});
  if (static_cast<int64_t>(write_behind_.queue.size()) > 2 * pool(Tier::kDevice).num_blocks()) {
    write_behind_.queue.pop_front();
    ++counters_.write_behind_dropped;
  }
}

int64_t KvCacheManager::DiskWritesNotSubmitted() const {
  int64_t blocks = static_cast<int64_t>(write_behind_.queue.size());
  // Copied off the device, not handed to the writer yet: the copy lands first.
  for (const PendingBatch& batch : copies_.batches) {
    for (const PendingCopy& copy : batch.copies) {
      const bool to_disk = copy.kind == PendingKind::kPersistToDisk || copy.kind == PendingKind::kDemoteToDisk ||
                           copy.kind == PendingKind::kSwapToDisk;
      blocks += to_disk ? 1 : 0;
    }
  }
  return blocks;
}

KvCacheManager::PendingWrites KvCacheManager::pending_writes() const {
  PendingWrites pending;
  if (disk_tier_.jobs != nullptr) pending.disk_blocks = DiskWritesNotSubmitted() + disk_tier_.jobs->num_writes_unfinished();
  if (remote_.store != nullptr) {
    pending.remote_blocks = static_cast<int64_t>(remote_.put_queue.size()) + remote_.store->puts_pending();
  }
  return pending;
}

int64_t KvCacheManager::WriteBehindLimit() const {
  return std::clamp<int64_t>(kWriteBehindBytesInFlight / static_cast<int64_t>(block_bytes_), 2, kWriteBehindMaxBlocks);
}

void KvCacheManager::FinishStep(bool idle) {
  FinishCopies(0);
  LandDiskJobs();
  StartRemotePuts();  // the blocks this step computed, to the remote tier's I/O thread
  // Idle: the rest of the queue too (a batch per put buffer), within the budget, so that an
  // idle context's blocks reach the remote tier before its next request.
  if (idle && remote_.store != nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + write_behind_.idle_drain_budget;
    DrainRemotePutQueue([&] { return remote_.store->WaitForPutRoom(deadline); });
  }
  if (write_behind_.pause_steps > 0) --write_behind_.pause_steps;
  if (!idle || disk_tier_.jobs == nullptr) {
    StartWriteBehind(/*idle=*/false);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + write_behind_.idle_drain_budget;
  while (!write_behind_.queue.empty() && write_behind_.pause_steps == 0) {
    const size_t queued = write_behind_.queue.size();
    StartWriteBehind(/*idle=*/true);
    if (write_behind_.queue.size() < queued) continue;
    if (std::chrono::steady_clock::now() >= deadline) break;
    // No progress: the next block waits for a copy reading it, a write-behind buffer or a
    // disk slot; the copies land first, then the oldest write-behind write frees a buffer.
    if (!copies_.batches.empty()) {
      DrainCopies();
      continue;
    }
    std::optional<DiskJobId> oldest;
    disk_tier_.jobs->ForEach<PersistWriteJob>([&](DiskJobId id, const PersistWriteJob&) {
      if (!oldest || id.seq < oldest->seq) oldest = id;
    });
    if (!oldest) break;
    AwaitDiskJob(oldest);
  }
}

int64_t KvCacheManager::PumpIdleWrites() {
  FinishCopies(0);
  LandDiskJobs();
  if (remote_.store != nullptr) {
    // A batch per put buffer while the put lane has room; nothing is waited for.
    DrainRemotePutQueue([&] { return remote_.store->WaitForPutRoom(std::chrono::steady_clock::now()); });
  }
  StartWriteBehind(/*idle=*/true);
  int64_t disk = 0;
  if (disk_tier_.jobs != nullptr && write_behind_.pause_steps == 0) {
    // Written but not landed counts too: landing frees its buffer for the next block and
    // enters it in the disk tier's index.
    disk = DiskWritesNotSubmitted() + disk_tier_.jobs->num_writes_in_flight();
  }
  return disk + pending_writes().remote_blocks;
}

void KvCacheManager::StartWriteBehind(bool idle) {
  if (disk_tier_.jobs == nullptr || write_behind_.buffers.count == 0 || write_behind_.queue.empty()) return;
  if (write_behind_.pause_steps > 0) return;  // a write failed: the disk is not hammered every step
  DiskJobs& jobs = *disk_tier_.jobs;
  const int64_t limit = WriteBehindLimit();
  int64_t in_flight = jobs.Count<PersistWriteJob>() + jobs.Count<WriteBackJob>();
  // The writer is busy with writes a step may wait for (evictions, swaps): those first.
  if (!idle && jobs.num_writes_in_flight() - in_flight - jobs.Count<RenewRecordJob>() >= limit) {
    ++counters_.write_behind_skipped_busy;
    return;
  }
  std::vector<PendingCopy> batch;
  absl::flat_hash_set<BlockHash> in_batch;  // a block queued twice (recomputed, hit) is copied once
  std::deque<std::pair<BlockId, BlockHash>>& queue = write_behind_.queue;
  // Blocks that cannot go yet (a copy reads them, no buffer or room in flight) are skipped,
  // kept in order at the front, so that those behind them with a host copy still go. The
  // scan is bounded per step; idle, nothing else needs the writer: everything is tried.
  std::deque<std::pair<BlockId, BlockHash>> waiting;
  size_t budget = idle ? queue.size() : static_cast<size_t>(2 * limit);
  while (!queue.empty() && budget-- > 0) {
    const std::pair<BlockId, BlockHash> entry = queue.front();
    queue.pop_front();
    const auto [block, hash] = entry;
    // On disk (since queued), or on its way there: done.
    if (state(Tier::kDisk).by_hash.contains(hash) || jobs.PersistWriteOf(hash) || jobs.DemoteWriteOf(hash) ||
        in_batch.contains(hash)) {
      continue;
    }
    const bool room = idle || in_flight < limit;
    if (auto host = state(Tier::kHost).by_hash.find(hash); host != state(Tier::kHost).by_hash.end()) {
      // From its host copy (stays cached, not rewritten, while written: as a write-back).
      if (jobs.WriteBackOfHostSlot(host->second)) continue;  // on its way
      if (!room) {
        waiting.push_back(entry);
        continue;
      }
      const int32_t host_slot = host->second;  // AllocateSlot changes no host entry
      const std::optional<int32_t> disk_slot = AllocateSlot(Tier::kDisk);
      if (!disk_slot) {  // every disk slot is held (swaps, writes in flight)
        waiting.push_back(entry);
        break;
      }
      jobs.SubmitWrite(WriteBackJob{*disk_slot, host_slot, hash}, *disk_slot, hash.digest,
                       StoredTokens(Tier::kHost, host_slot), HostSlot(host_slot));
      ++in_flight;
      continue;
    }
    auto cached = state(Tier::kDevice).hash_of.find(block);
    if (cached == state(Tier::kDevice).hash_of.end() || cached->second != hash) continue;  // evicted or reused
    // A copy of it to the host tier in flight (its host copy serves once landed), or no
    // buffer or room: later.
    if (copies_.reading_ticket.contains(block) || write_behind_.buffers.free.empty() || !room) {
      waiting.push_back(entry);
      continue;
    }
    const std::optional<int32_t> disk_slot = AllocateSlot(Tier::kDisk);
    if (!disk_slot) {
      waiting.push_back(entry);
      break;
    }
    PendingCopy c;
    c.kind = PendingKind::kPersistToDisk;
    c.block = block;
    c.slot = *disk_slot;
    c.staging = write_behind_.buffers.free.back();
    write_behind_.buffers.free.pop_back();
    c.hash = hash;
    const std::span<const int32_t> tokens = StoredTokens(Tier::kDevice, block);
    c.tokens.assign(tokens.begin(), tokens.end());
    batch.push_back(std::move(c));
    in_batch.insert(hash);
    ++in_flight;
  }
  queue.insert(queue.begin(), waiting.begin(), waiting.end());
  if (batch.empty()) return;
  const std::vector<PendingCopy> copies = batch;
  const absl::StatusOr<int64_t> ticket = StartBatch(std::move(batch));
  if (!ticket.ok()) {
    for (const PendingCopy& c : copies) {
      write_behind_.buffers.free.push_back(c.staging);
      pool(Tier::kDisk).Release(c.slot);
    }
    ++counters_.io_errors;
    return;
  }
  // Landing submits the disk writes. Idle, no forward follows to overlap the copies: wait
  // for them, so the writes start now.
  FinishCopies(idle ? *ticket : 0);
}

}  // namespace kvtier
