// TierCopies: the CUDA backend's block copies between its device KV pool and host memory
// (Backend's copy methods), all on one copy stream and timed by events from a pool made
// when the backend is created (no creation while stepping): synchronous copies (the host
// waits), prefetches (host -> device; the next forward waits for them on the device, never
// the host), and asynchronous device -> host copies (swap-outs and prefix-cache write-backs
// run while the compute stream runs forwards; the KV manager polls tickets and consumes the
// host bytes once landed). Timings go to the CopyStatsBoard.
//
// Why one copy stream for both directions: it keeps the Backend contract "a device -> host
// copy writes a host buffer only after every host -> device copy started before has read
// it" (the manager reuses host slots as soon as a swap-in has started) without extra
// events. The price is that a prefetch queues behind device -> host copies started before
// it; those are started before the forward they overlap, so they have normally landed by
// the time the next prefetches are issued (after that forward).
//
// One thread at a time (the backend's).
#ifndef KVTIER_BACKEND_CUDA_TIER_COPIES_H_
#define KVTIER_BACKEND_CUDA_TIER_COPIES_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/cuda/copy_stats_board.h"
#include "backend/cuda/device_kv_pool.h"

namespace kvtier::cuda {

class TierCopies {
 public:
  // compute: the forward's stream; pool: the blocks copies name (read at every call).
  static absl::StatusOr<std::unique_ptr<TierCopies>> Create(cudaStream_t compute, const DeviceKvPool* pool,
                                                            CopyStatsBoard* stats);
  ~TierCopies();  // waits for the copy stream
  TierCopies(const TierCopies&) = delete;
  TierCopies& operator=(const TierCopies&) = delete;

  // Synchronous copies of whole blocks (kind: device -> host or host -> device).
  absl::Status CopySync(std::span<const BlockCopy> copies, cudaMemcpyKind kind);
  // Device-tier block to device-tier block; synchronous.
  absl::Status CopyBlock(int32_t src_block, int32_t dst_block);
  // Host -> device copies; the host does not wait.
  absl::Status Prefetch(std::span<const BlockCopy> copies);
  // Marks the prefetches started so far; the next forward's first kernel waits for them.
  absl::Status MarkPrefetches();
  // Asynchronous device -> host copies, after the last forward; a ticket to poll.
  absl::StatusOr<int64_t> StartToHost(std::span<const BlockCopy> copies);
  absl::StatusOr<bool> Done(int64_t ticket);
  absl::Status Wait(int64_t ticket);

  // The forward's side, in order: before its first kernel, the wait for the marked
  // prefetches (if any) on the compute stream; after its last, the mark every later copy
  // waits for; once it finished, the timings that landed.
  absl::Status ApplyPrefetchWait();
  absl::Status RecordForwardDone();
  // Folds finished prefetch / stall timings into the stats; `block` waits for all.
  absl::Status HarvestTimings(bool block);

 private:
  struct CopyTiming {
    cudaEvent_t start = nullptr, end = nullptr;
    int64_t bytes = 0;
  };
  struct StallTiming {
    cudaEvent_t ready = nullptr;  // compute stream reached the wait
    cudaEvent_t mark = nullptr;   // copy stream finished the prefetches waited for
  };
  struct AsyncCopyBatch {
    int64_t ticket = 0;
    cudaEvent_t start = nullptr, end = nullptr;
    int64_t bytes = 0;
  };

  TierCopies(cudaStream_t compute, const DeviceKvPool* pool, CopyStatsBoard* stats)
      : compute_(compute), pool_(pool), stats_(stats) {}
  // Timing events come from the pool created at Create.
  absl::StatusOr<cudaEvent_t> TakeEvent();
  // Folds landed async batches (in order) into the stats and returns their events.
  absl::Status HarvestAsyncCopies();

  const cudaStream_t compute_;
  const DeviceKvPool* const pool_;
  CopyStatsBoard* const stats_;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;  // the last forward's end
  // Tier-copy timing (all events timing-enabled, from event_pool_).
  std::vector<cudaEvent_t> all_events_;
  std::vector<cudaEvent_t> event_pool_;
  std::deque<CopyTiming> prefetches_in_flight_;
  std::deque<StallTiming> stalls_in_flight_;
  cudaEvent_t pending_wait_mark_ = nullptr;  // set by MarkPrefetches, used by the next forward
  bool prefetch_since_wait_ = false;
  cudaEvent_t sync_start_ = nullptr, sync_end_ = nullptr;
  std::deque<AsyncCopyBatch> async_out_in_flight_;
  int64_t next_async_ticket_ = 1;
  int64_t async_done_through_ = 0;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_TIER_COPIES_H_
