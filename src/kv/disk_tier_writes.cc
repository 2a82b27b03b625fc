// DiskTier's writes (the contract is at the top of disk_tier.h): write-behind of blocks
// cached on the device, write-back of cold host blocks, device and host victims written at
// their eviction, and what landing each write does.
#include <algorithm>
#include <chrono>
#include <optional>
#include <type_traits>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "common/log.h"
#include "kv/disk_tier.h"
#include "kv/host_tier.h"

namespace kvtier {
namespace {

// Bytes of write-behind writes in flight at most (and blocks, below): what a crash can
// lose beyond the queue, and what the writer has queued ahead of an eviction's write.
constexpr int64_t kWriteBehindBytesInFlight = 64ll << 20;
constexpr int64_t kWriteBehindMaxBlocks = 32;

}  // namespace

void DiskTier::QueueWrite(BlockId block, const BlockHash& hash, bool) {
  if (!on() || write_behind_.buffers.count == 0) return;
  // On disk already (written before; recomputed or hit now): in use again, so its record is
  // renewed at once, or a restart would take it for one of the oldest blocks.
  if (const std::optional<int32_t> on_disk = cache_.Find(hash)) {
    cache_.Touch(hash, ctx_->priorities.Of(hash));
    ctx_->transfers.SubmitDiskWrite(RenewRecordJob{*on_disk}, *on_disk, hash.digest, {}, nullptr);
    return;
  }
  write_behind_.queue.push_back({block, hash});
  if (static_cast<int64_t>(write_behind_.queue.size()) > 2 * ctx_->device.num_blocks()) {
    write_behind_.queue.pop_front();
    ++ctx_->counters.disk.write_behind_dropped;
  }
}

void DiskTier::StartWrites(WritePhase phase) {
  switch (phase) {
    case WritePhase::kBeforeForward:
      // After the host's write-back took its slots: the host LRU starts with the next victims.
      if (host_->on() && ctx_->options.prefix_cache) StartWriteBack();
      StartWriteBehind(/*idle=*/false);
      return;
    case WritePhase::kStepEnd:
    case WritePhase::kIdleStep:
      if (write_behind_.pause_steps > 0) --write_behind_.pause_steps;
      if (phase == WritePhase::kIdleStep && on()) {
        DrainWriteBehind();
      } else {
        StartWriteBehind(/*idle=*/false);
      }
      return;
    case WritePhase::kIdlePump:
      StartWriteBehind(/*idle=*/true);
      return;
  }
}

int64_t DiskTier::WritesNotSubmitted() const {
  int64_t blocks = static_cast<int64_t>(write_behind_.queue.size());
  // Copied off the device, not handed to the writer yet: the copy lands first.
  const Transfers& t = ctx_->transfers;
  blocks += t.Count<PersistCopy>() + t.Count<DemoteCopy>();
  t.ForEach<SwapOutCopy>([&](TransferId, const SwapOutCopy& c) { blocks += c.staging >= 0 ? 1 : 0; });
  return blocks;
}

int64_t DiskTier::PendingWrites() const {
  return on() ? WritesNotSubmitted() + ctx_->transfers.num_disk_writes_unfinished() : 0;
}

int64_t DiskTier::WritesToPump() const {
  // Written but not landed counts too: landing frees its buffer for the next block and
  // enters it in the cache. Nothing while write-behind is paused after a failed write
  // (the next step resumes it).
  if (!on() || write_behind_.pause_steps > 0) return 0;
  return WritesNotSubmitted() + ctx_->transfers.num_in_flight(Lane::kDiskWrite);
}

int64_t DiskTier::WriteBehindLimit() const {
  return std::clamp<int64_t>(kWriteBehindBytesInFlight / static_cast<int64_t>(ctx_->block_bytes), 2,
                             kWriteBehindMaxBlocks);
}

void DiskTier::DrainWriteBehind() {
  const auto deadline = std::chrono::steady_clock::now() + write_behind_.idle_drain_budget;
  Transfers& transfers = ctx_->transfers;
  while (!write_behind_.queue.empty() && write_behind_.pause_steps == 0) {
    const size_t queued = write_behind_.queue.size();
    StartWriteBehind(/*idle=*/true);
    if (write_behind_.queue.size() < queued) continue;
    if (std::chrono::steady_clock::now() >= deadline) break;
    // No progress: the next block waits for a copy reading it, a write-behind buffer or a
    // disk slot; the copies land first, then the oldest write-behind write frees a buffer.
    if (transfers.num_copy_batches() > 0) {
      ctx_->DrainCopies();
      continue;
    }
    std::optional<TransferId> oldest;
    transfers.ForEach<PersistWriteJob>([&](TransferId id, const PersistWriteJob&) {
      if (!oldest || id.seq < oldest->seq) oldest = id;
    });
    if (!oldest) break;
    transfers.Await(oldest);
  }
}

void DiskTier::StartWriteBehind(bool idle) {
  if (!on() || write_behind_.buffers.count == 0 || write_behind_.queue.empty()) return;
  if (write_behind_.pause_steps > 0) return;  // a write failed: the disk is not hammered every step
  Transfers& transfers = ctx_->transfers;
  const int64_t limit = WriteBehindLimit();
  int64_t in_flight = transfers.Count<PersistWriteJob>() + transfers.Count<WriteBackJob>();
  // The writer is busy with writes a step may wait for (evictions, swaps): those first.
  if (!idle && transfers.num_in_flight(Lane::kDiskWrite) - in_flight - transfers.Count<RenewRecordJob>() >= limit) {
    ++ctx_->counters.disk.write_behind_skipped_busy;
    return;
  }
  std::vector<Transfers::Copy> batch;
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
    if (cache_.Contains(hash) || transfers.PersistWriteOf(hash) || transfers.DemoteWriteOf(hash) ||
        in_batch.contains(hash)) {
      continue;
    }
    const bool room = idle || in_flight < limit;
    if (const std::optional<int32_t> host_slot = host_->cache().Find(hash)) {
      // From its host copy (stays cached, not rewritten, while written: as a write-back).
      if (transfers.WriteBackOfHostSlot(*host_slot)) continue;  // on its way
      if (!room) {
        waiting.push_back(entry);
        continue;
      }
      const std::optional<int32_t> disk_slot = TakeSlot();  // changes no host entry
      if (!disk_slot) {  // every disk slot is held (swaps, writes in flight)
        waiting.push_back(entry);
        break;
      }
      transfers.SubmitDiskWrite(WriteBackJob{*disk_slot, *host_slot, hash}, *disk_slot, hash.digest,
                                host_->cache().tokens(*host_slot), host_->bytes(*host_slot));
      ++in_flight;
      continue;
    }
    const BlockHash* cached = ctx_->device.KeyOf(block);
    if (cached == nullptr || *cached != hash) continue;  // evicted or reused
    // A copy of it to the host tier in flight (its host copy serves once landed), or no
    // buffer or room: later.
    if (transfers.ReadingBatch(block) || write_behind_.buffers.free.empty() || !room) {
      waiting.push_back(entry);
      continue;
    }
    const std::optional<int32_t> disk_slot = TakeSlot();
    if (!disk_slot) {
      waiting.push_back(entry);
      break;
    }
    const int32_t buffer = write_behind_.buffers.free.back();
    write_behind_.buffers.free.pop_back();
    const std::span<const int32_t> tokens = ctx_->device.tokens(block);
    batch.push_back({PersistCopy{block, *disk_slot, buffer, hash, Tokens(tokens.begin(), tokens.end())}, block,
                     write_behind_buffer(buffer)});
    in_batch.insert(hash);
    ++in_flight;
  }
  queue.insert(queue.begin(), waiting.begin(), waiting.end());
  if (batch.empty()) return;
  std::vector<PersistCopy> started;
  for (const Transfers::Copy& c : batch) started.push_back(std::get<PersistCopy>(c.transfer));
  const absl::StatusOr<int64_t> batch_id = transfers.StartCopies(std::move(batch));
  if (!batch_id.ok()) {
    for (const PersistCopy& c : started) {
      write_behind_.buffers.free.push_back(c.buffer);
      cache_.pool().Release(c.disk_slot);
    }
    ++ctx_->counters.io_errors;
    return;
  }
  // Landing submits the disk writes. Idle, no forward follows to overlap the copies: wait
  // for them, so the writes start now.
  if (idle) {
    transfers.Await(Transfers::CopyBatch(*batch_id));
  } else {
    transfers.Land(LaneBit(Lane::kCopy));
  }
}

void DiskTier::StartWriteBack() {
  if (!on()) return;
  // Which host blocks: the `target` coldest cached ones (the victims of the next `target`
  // host allocations beyond the free slots) should be on disk or on their way there. A
  // step takes up to WriteBackBudget() host slots for device write-back, plus swap-outs, so
  // twice that keeps the writer busy across a step while evictions find their blocks
  // written. Nothing is written while the host tier has that many free slots: writing
  // blocks that may never be evicted would only take disk slots (and evict disk entries).
  // The queue is bounded by the same number (and half the disk tier), so a slow disk makes
  // evictions wait for one write at a time instead of queueing unboundedly.
  if (write_back_pause_steps_ > 0) {
    --write_back_pause_steps_;
    return;
  }
  const int64_t target = 2 * host_->WriteBackBudget();
  const int64_t victims = target - host_->cache().pool().num_free();
  if (victims <= 0) return;
  Transfers& transfers = ctx_->transfers;
  const int64_t max_in_flight = std::max<int64_t>(1, std::min<int64_t>(target, num_blocks() / 2));
  std::vector<int32_t> to_write;
  int64_t examined = 0;
  int64_t room = max_in_flight - transfers.Count<WriteBackJob>();
  host_->cache().lru().ForEachInEvictionOrder([&](int32_t slot) {
    if (examined++ >= victims || room <= 0) return false;
    if (transfers.WriteBackOfHostSlot(slot) || cache_.Contains(*host_->cache().KeyOf(slot))) return true;
    to_write.push_back(slot);
    --room;
    return true;
  });
  for (int32_t host_slot : to_write) {
    // May drop the disk LRU entry, as this block's eviction from the host would later.
    const std::optional<int32_t> disk_slot = TakeSlot();
    if (!disk_slot) break;  // every disk slot is held (swaps, writes in flight)
    const BlockHash hash = *host_->cache().KeyOf(host_slot);
    transfers.SubmitDiskWrite(WriteBackJob{*disk_slot, host_slot, hash}, *disk_slot, hash.digest,
                              host_->cache().tokens(host_slot), host_->bytes(host_slot));
  }
}

std::vector<DirtyVictim> DiskTier::TakeDeviceVictims(std::vector<DirtyVictim> victims) {
  if (!on()) return victims;
  Transfers& transfers = ctx_->transfers;
  // Batches of device -> staging copies, each waited for (the caller may overwrite the
  // device blocks once it returns); landing one submits its disk writes. A batch ends when
  // the staging buffers run out: the next victim's buffer is then the oldest write's.
  std::vector<Transfers::Copy> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    std::vector<DemoteCopy> started;
    for (const Transfers::Copy& c : batch) started.push_back(std::get<DemoteCopy>(c.transfer));
    const absl::StatusOr<int64_t> batch_id = transfers.StartCopies(std::move(batch));
    batch.clear();
    if (batch_id.ok()) {
      transfers.Await(Transfers::CopyBatch(*batch_id));
      return;
    }
    for (const DemoteCopy& c : started) {
      ReleaseStaging(c.staging);
      cache_.pool().Release(c.disk_slot);
      ++ctx_->counters.io_errors;
      ++ctx_->counters.blocks_dropped;
    }
  };
  for (DirtyVictim& v : victims) {
    // On disk already, or on its way there (evicted before and recomputed since, or by
    // write-behind): no second copy.
    if (cache_.Contains(v.hash) || transfers.DemoteWriteOf(v.hash) || transfers.PersistWriteOf(v.hash)) continue;
    if (staging_.free.empty()) flush();
    // The buffer first: waiting for a write may free disk slots too.
    const std::optional<int32_t> buffer = AcquireStaging();
    const std::optional<int32_t> disk_slot = buffer ? TakeSlot() : std::nullopt;
    if (!disk_slot) {  // every disk slot is held (swaps, writes in flight)
      if (buffer) ReleaseStaging(*buffer);
      ++ctx_->counters.blocks_dropped;
      continue;
    }
    batch.push_back({DemoteCopy{v.block, *disk_slot, *buffer, v.hash, std::move(v.tokens), v.priority}, v.block,
                     staging(*buffer)});
  }
  flush();
  return {};
}

void DiskTier::TakeHostVictim(int32_t host_slot, const BlockHash& hash) {
  Transfers& transfers = ctx_->transfers;
  // Its write-back still in flight (queued too late, or a slow disk): waited for rather than
  // written a second time; landed, it is on disk (or failed, and it is written below). The
  // same for a device demotion or write-behind of the same content on its way here.
  transfers.Await(transfers.WriteBackOfHostSlot(host_slot));
  transfers.Await(transfers.DemoteWriteOf(hash));
  transfers.Await(transfers.PersistWriteOf(hash));
  if (cache_.Contains(hash)) {
    ++ctx_->counters.disk.host_evictions_on_disk;  // written back ahead (or demoted before): no write
    return;
  }
  if (const std::optional<int32_t> disk_slot = TakeSlot()) {
    ++ctx_->counters.disk.host_evictions_written;
    const std::span<const int32_t> tokens = host_->cache().tokens(host_slot);
    // The writer writes it now, behind the writes already queued (the disk takes them in
    // order anyway), and the eviction waits for it: the host slot is reused at once.
    const absl::Status written =
        transfers.disk_open()
            ? transfers.AwaitResult(transfers.SubmitDiskWrite(EvictionWriteJob{}, *disk_slot, hash.digest, tokens,
                                                              host_->bytes(host_slot)))
            : store_->Write(*disk_slot, hash.digest, tokens, host_->bytes(host_slot), DiskBlockStore::Content::kCached);
    if (written.ok() && cache_.Contains(hash)) {  // landed meanwhile
      cache_.pool().Release(*disk_slot);
      return;
    }
    if (written.ok()) {
      CacheBlock(*disk_slot, hash);
      return;
    }
    ++ctx_->counters.io_errors;
    cache_.pool().Release(*disk_slot);
  }
  ++ctx_->counters.blocks_dropped;
}

// ---------------------------------------------------------------- landing

void DiskTier::Land(Transfers::Landed& landed) {
  const absl::Status& status = landed.status;
  std::visit(
      [&](const auto& t) {
        using Kind = std::decay_t<decltype(t)>;
        if constexpr (std::is_same_v<Kind, PersistCopy>) LandPersistCopy(t, status);
        if constexpr (std::is_same_v<Kind, DemoteCopy>) LandDemoteCopy(t, status);
        if constexpr (std::is_same_v<Kind, WriteBackJob>) LandWriteBack(t, status);
        if constexpr (std::is_same_v<Kind, DemoteWriteJob>) LandDemoteWrite(t, status);
        if constexpr (std::is_same_v<Kind, PersistWriteJob>) LandPersistWrite(t, status);
        if constexpr (std::is_same_v<Kind, PrefixReadJob>) LandPrefixRead(t, status);
        if constexpr (std::is_same_v<Kind, SpeedProbeJob>) LandSpeedProbe();
      },
      landed.transfer);
}

void DiskTier::LandPersistCopy(const PersistCopy& copy, const absl::Status& status) {
  if (status.ok()) {
    // The writer writes it (and the store journals it); the device copy stays cached.
    ctx_->transfers.SubmitDiskWrite(PersistWriteJob{copy.disk_slot, copy.buffer, copy.hash}, copy.disk_slot,
                                    copy.hash.digest, copy.tokens, write_behind_buffer(copy.buffer));
    return;
  }
  write_behind_.buffers.free.push_back(copy.buffer);
  cache_.pool().Release(copy.disk_slot);
  ++ctx_->counters.io_errors;
}

void DiskTier::LandDemoteCopy(const DemoteCopy& copy, const absl::Status& status) {
  if (status.ok()) {
    // Staged: the writer writes it; until then the slot is in no cache map.
    ctx_->transfers.SubmitDiskWrite(DemoteWriteJob{copy.disk_slot, copy.staging, copy.hash, copy.priority},
                                    copy.disk_slot, copy.hash.digest, copy.tokens, staging(copy.staging));
    return;
  }
  ReleaseStaging(copy.staging);
  cache_.pool().Release(copy.disk_slot);
  ++ctx_->counters.io_errors;
  ++ctx_->counters.blocks_dropped;
}

void DiskTier::LandWriteBack(const WriteBackJob& job, const absl::Status& status) {
  if (status.ok() && !cache_.Contains(job.hash)) {
    // The host copy is still cached (a host eviction waits for its write), so the key still
    // has its priority.
    CacheBlock(job.disk_slot, job.hash);
    ++ctx_->counters.disk.blocks_written_back;
    return;
  }
  if (!status.ok()) {
    ++ctx_->counters.io_errors;
    write_back_pause_steps_ = kWritePauseSteps;
    Log(LogLevel::kWarn, "disk tier: host -> disk write-back paused for ", kWritePauseSteps,
        " steps after a failed write: ", status.message());
  } else {
    store_->Forget(job.disk_slot);  // a second copy: the first one stays
  }
  cache_.pool().Release(job.disk_slot);
}

void DiskTier::LandDemoteWrite(const DemoteWriteJob& job, const absl::Status& status) {
  ReleaseStaging(job.staging);
  if (status.ok() && !cache_.Contains(job.hash)) {
    ctx_->priorities.Raise(job.hash, job.priority);  // dropped with its device entry
    CacheBlock(job.disk_slot, job.hash);
    ++ctx_->counters.disk.demote_writes;
    return;
  }
  if (!status.ok()) {  // its only copy: lost
    ++ctx_->counters.io_errors;
    ++ctx_->counters.blocks_dropped;
  } else {
    store_->Forget(job.disk_slot);  // a second copy: the first one stays
  }
  cache_.pool().Release(job.disk_slot);
}

void DiskTier::LandPersistWrite(const PersistWriteJob& job, const absl::Status& status) {
  write_behind_.buffers.free.push_back(job.buffer);
  if (status.ok() && !cache_.Contains(job.hash)) {
    CacheBlock(job.disk_slot, job.hash);
    ++ctx_->counters.disk.blocks_persisted;
    return;
  }
  if (!status.ok()) {  // the device copy is still cached: only durability is lost
    ++ctx_->counters.io_errors;
    write_behind_.pause_steps = kWritePauseSteps;
    Log(LogLevel::kWarn, "disk tier: write-behind paused for ", kWritePauseSteps,
        " steps after a failed write: ", status.message());
  } else {
    store_->Forget(job.disk_slot);  // a second copy: the first one stays
  }
  cache_.pool().Release(job.disk_slot);
}

}  // namespace kvtier
