// KvCacheManager's disk jobs landing (the contract is at the top of kv_cache_manager.h):
// the one place where a finished disk job takes effect, by its kind — a written block joins
// the disk cache or gives its slot back, a read-ahead block becomes a host copy, a failure
// is counted and marks what it failed — and the waits for a job in flight. Stepping thread.
#include <chrono>
#include <type_traits>

#include "common/log.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {
namespace {

// Steps without host -> disk write-back after a failed write (see StartDiskWriteBack).
constexpr int64_t kDiskWritePauseSteps = 16;

}  // namespace

void KvCacheManager::CountReadFailure(const absl::Status& status) {
  if (status.ok()) return;
  if (absl::IsDataLoss(status)) {
    ++counters_.corrupt_blocks_detected;
  } else if (absl::IsFailedPrecondition(status)) {
    ++counters_.prefix_token_mismatch;  // the key's slot holds other tokens: refused
  } else if (absl::IsNotFound(status)) {
    ++counters_.disk_stale_entries;  // the slot holds another block now
  } else {
    ++counters_.io_errors;
  }
}

void KvCacheManager::LandDiskJobs(DiskThreads which) {
  if (disk_tier_.jobs == nullptr) return;
  for (DiskJobs::Landed& landed : disk_tier_.jobs->TakeFinished(which)) LandDiskJob(landed);
}

void KvCacheManager::AwaitDiskJob(std::optional<DiskJobId> job) {
  if (disk_tier_.jobs == nullptr || !job.has_value()) return;
  const DiskThreads thread = job->read ? DiskThreads::kReader : DiskThreads::kWriter;
  LandDiskJobs(thread);
  // Still in flight after landing what is done: only then does the host wait (and count it).
  if (!disk_tier_.jobs->InFlight(*job)) return;
  const auto start = std::chrono::steady_clock::now();
  disk_tier_.jobs->Wait(*job);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (job->read) {
    counters_.disk_read_ahead_wait_seconds += seconds;
    ++counters_.disk_read_ahead_waits;
  } else {
    counters_.disk_write_wait_seconds += seconds;
    ++counters_.disk_write_waits;
  }
  LandDiskJobs(thread);
}

absl::Status KvCacheManager::AwaitResult(DiskJobId job) {
  if (disk_tier_.jobs->InFlight(job)) {
    disk_tier_.jobs->Wait(job);
    LandDiskJobs(job.read ? DiskThreads::kReader : DiskThreads::kWriter);
  }
  return disk_tier_.jobs->TakeResult(job).value_or(absl::InternalError("kv cache: disk job not reported"));
}

void KvCacheManager::LandDiskJob(DiskJobs::Landed& landed) {
  const absl::Status& status = landed.status;
  std::visit(
      [&](auto& job) {
        using Kind = std::decay_t<decltype(job)>;
        if constexpr (std::is_same_v<Kind, WriteBackJob>) {
          if (status.ok() && !state(Tier::kDisk).by_hash.contains(job.hash)) {
            // The host copy is still cached (a host eviction waits for its write), so the
            // hash still has its priority.
            CacheOnDisk(job.disk_slot, job.hash);
            ++counters_.disk_blocks_written_back;
          } else {
            if (!status.ok()) {
              ++counters_.io_errors;
              disk_tier_.write_pause_steps = kDiskWritePauseSteps;
              Log(LogLevel::kWarn, "disk tier: host -> disk write-back paused for ", kDiskWritePauseSteps,
                  " steps after a failed write: ", status.message());
            } else {
              disk_tier_.store->Forget(job.disk_slot);  // a second copy: the first one stays
            }
            pool(Tier::kDisk).Release(job.disk_slot);
          }
        } else if constexpr (std::is_same_v<Kind, SwapWriteJob>) {
          staging_.free.push_back(job.staging);
          if (!SwapHoldsDiskSlot(job.seq, job.generation, job.index, job.disk_slot)) {
            pool(Tier::kDisk).Release(job.disk_slot);  // released meanwhile: the write held the slot
          } else if (status.ok()) {
            ++counters_.disk_swap_writes;
          } else {
            ++counters_.io_errors;
            SwapState& swap = swapped_.at(job.seq);
            if (swap.failed.ok()) swap.failed = status;  // SwapIn reports it: recompute
          }
        } else if constexpr (std::is_same_v<Kind, DemoteWriteJob>) {
          staging_.free.push_back(job.staging);
          if (status.ok() && !state(Tier::kDisk).by_hash.contains(job.hash)) {
            RaisePriority(job.hash, job.priority);  // dropped with its device entry
            CacheOnDisk(job.disk_slot, job.hash);
            ++counters_.disk_demote_writes;
          } else {
            if (!status.ok()) {  // its only copy: lost
              ++counters_.io_errors;
              ++counters_.blocks_dropped;
            } else {
              disk_tier_.store->Forget(job.disk_slot);  // a second copy: the first one stays
            }
            pool(Tier::kDisk).Release(job.disk_slot);
          }
        } else if constexpr (std::is_same_v<Kind, PersistWriteJob>) {
          write_behind_.buffers.free.push_back(job.staging);
          if (status.ok() && !state(Tier::kDisk).by_hash.contains(job.hash)) {
            CacheOnDisk(job.disk_slot, job.hash);
            ++counters_.blocks_persisted;
          } else {
            if (!status.ok()) {  // the device copy is still cached: only durability is lost
              ++counters_.io_errors;
              write_behind_.pause_steps = kDiskWritePauseSteps;
              Log(LogLevel::kWarn, "disk tier: write-behind paused for ", kDiskWritePauseSteps,
                  " steps after a failed write: ", status.message());
            } else {
              disk_tier_.store->Forget(job.disk_slot);  // a second copy: the first one stays
            }
            pool(Tier::kDisk).Release(job.disk_slot);
          }
        } else if constexpr (std::is_same_v<Kind, PrefixReadJob>) {
          CountReadFailure(status);
          if (absl::IsDataLoss(status) || absl::IsNotFound(status)) {  // never used as data: forget the slot
            ForgetDiskSlot(job.disk_slot);
          } else {
            lru(Tier::kDisk).PushBack(job.disk_slot, PriorityOf(job.hash));
          }
          TierState& host = state(Tier::kHost);
          if (status.ok() && !host.by_hash.contains(job.hash)) {
            host.by_hash[job.hash] = job.host_slot;
            host.hash_of[job.host_slot] = job.hash;
            lru(Tier::kHost).PushBack(job.host_slot, PriorityOf(job.hash));
            ++counters_.disk_read_aheads;
          } else {
            pool(Tier::kHost).Release(job.host_slot);
          }
        } else if constexpr (std::is_same_v<Kind, SwapReadJob>) {
          CountReadFailure(status);
          if (!SwapHoldsDiskSlot(job.seq, job.generation, job.index, job.disk_slot)) {
            // Released meanwhile: the read held the disk slot.
            pool(Tier::kHost).Release(job.host_slot);
            pool(Tier::kDisk).Release(job.disk_slot);
            return;
          }
          SwapState& swap = swapped_.at(job.seq);
          if (status.ok()) {
            swap.slots[job.index] = SlotRef{Tier::kHost, job.host_slot};
            pool(Tier::kDisk).Release(job.disk_slot);
            ++counters_.disk_read_aheads;
          } else {
            pool(Tier::kHost).Release(job.host_slot);
            if (swap.failed.ok()) swap.failed = status;  // SwapIn reports it: recompute
          }
        }
        // EvictionWriteJob, StagedReadJob: their callers wait for them and take the result.
        // RenewRecordJob: nothing to land (a slot rewritten meanwhile is NotFound: fine).
        // SpeedProbeJob: nothing to land (what it measured is in the store's counters).
      },
      landed.job);
}

}  // namespace kvtier
