// KvCacheManager's disk -> device reads at a block's use (a prefix match or a swap-in of
// blocks nobody read ahead; the contract is at the top of kv_cache_manager.h): all of a
// call's reads go to the reader thread at once, into staging buffers, and each is copied to
// its device block as soon as it lands, so the file reads overlap the device copies and the
// stepping thread waits only for the last read. Stepping thread only.
#include <chrono>
#include <deque>

#include "absl/status/status.h"
#include "backend/backend.h"
#include "common/errors.h"
#include "kv/kv_cache_manager.h"

namespace kvtier {

std::vector<absl::Status> KvCacheManager::ReadDiskBlocksToDevice(const std::vector<StagedRead>& reads) {
  std::vector<absl::Status> results(reads.size());
  if (reads.empty()) return results;
  // Synchronous copies go behind the async ones on a copy engine: land those first, so the
  // host's wait for them is counted as a stall.
  DrainCopies();
  const auto start = std::chrono::steady_clock::now();
  struct InFlight {
    size_t index;  // into reads
    DiskJobId job;
    int32_t staging;
  };
  std::deque<InFlight> in_flight;  // submission order, which is the reader's finishing order
  auto land_oldest = [&] {
    const InFlight r = in_flight.front();
    in_flight.pop_front();
    absl::Status status = AwaitResult(r.job);  // lands any read-ahead finished before it too
    CountReadFailure(status);
    if (status.ok()) {
      const BlockCopy copy{reads[r.index].block, Staging(r.staging)};
      status = backend_->CopyBlocksFromHost(std::span<const BlockCopy>(&copy, 1));
      if (status.ok()) ++counters_.disk_staged_reads;
    }
    staging_.free.push_back(r.staging);
    results[r.index] = status;
  };
  for (size_t i = 0; i < reads.size(); ++i) {
    // Out of buffers: the oldest read of ours frees one soonest; else copies or writes do.
    if (staging_.free.empty() && !in_flight.empty()) land_oldest();
    const std::optional<int32_t> staging = AcquireStaging();
    if (!staging) {
      results[i] = absl::InternalError("kv cache: no staging buffer for a disk read");
      continue;
    }
    const DiskJobId job = disk_tier_.jobs->SubmitRead(StagedReadJob{}, reads[i].disk_slot, reads[i].key,
                                                      reads[i].tokens, Staging(*staging));
    in_flight.push_back({i, job, *staging});
  }
  while (!in_flight.empty()) land_oldest();
  counters_.copy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  counters_.swap_bytes_timed += static_cast<int64_t>(reads.size() * block_bytes_);
  return results;
}

}  // namespace kvtier
