// CudaBackend's tier copies (Backend's copy methods), all on the copy stream and timed by
// events from the pool Init creates: synchronous copies (the host waits), prefetches
// (host -> device; the next forward waits for them on the device, never the host), and
// asynchronous device -> host copies (StartCopiesToHost: swap-outs and prefix-cache
// write-backs run while the compute stream runs forwards; the KV manager polls tickets and
// consumes the host bytes once landed). Also the page-locked host memory they copy from.
//
// Why one copy stream for both directions: it keeps the Backend contract "a device -> host
// copy writes a host buffer only after every host -> device copy started before has read
// it" (the manager reuses host slots as soon as a swap-in has started) without extra
// events. The price is that a prefetch queues behind device -> host copies started before
// it; those are started before the forward they overlap, so they have normally landed by
// the time the next prefetches are issued (after that forward).
#include <algorithm>
#include <chrono>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "common/status_macros.h"

namespace kvtier {

absl::Status CudaBackend::TimedSyncCopies(std::span<const BlockCopy> copies, cudaMemcpyKind kind) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(ValidateBlock(c.device_block));
  if (copies.empty()) return absl::OkStatus();
  // After the last forward (compute_done_) and, on the copy stream, after every prefetch.
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  const size_t bytes = layout_.BlockBytes();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(sync_start_, copy_stream_));
  for (const BlockCopy& c : copies) {
    void* dev = const_cast<void*>(BlockDevicePointer(c.device_block));
    if (kind == cudaMemcpyDeviceToHost) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.host, dev, bytes, kind, copy_stream_));
    } else {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, c.host, bytes, kind, copy_stream_));
    }
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(sync_end_, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
  // sync_start_ completes only after earlier prefetches on the copy stream: no double count.
  RETURN_IF_ERROR(HarvestTimings(/*block=*/false));
  float ms = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, sync_start_, sync_end_));
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++copy_stats_.sync_batches;
  copy_stats_.sync_bytes += static_cast<int64_t>(bytes * copies.size());
  copy_stats_.sync_copy_seconds += ms * 1e-3;
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyBlocksToHost(std::span<const BlockCopy> copies) {
  return TimedSyncCopies(copies, cudaMemcpyDeviceToHost);
}

absl::Status CudaBackend::CopyBlocksFromHost(std::span<const BlockCopy> copies) {
  return TimedSyncCopies(copies, cudaMemcpyHostToDevice);
}

absl::StatusOr<cudaEvent_t> CudaBackend::TakeEvent() {
  if (event_pool_.empty()) RETURN_IF_ERROR(HarvestTimings(/*block=*/true));
  if (event_pool_.empty()) return absl::InternalError("cuda backend: timing event pool exhausted");
  cudaEvent_t e = event_pool_.back();
  event_pool_.pop_back();
  return e;
}

absl::Status CudaBackend::PrefetchBlocksFromHost(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(ValidateBlock(c.device_block));
  if (copies.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(cudaEvent_t start, TakeEvent());
  ASSIGN_OR_RETURN(cudaEvent_t end, TakeEvent());
  // The destination blocks were free: the last forward (compute_done_) is their last reader.
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(start, copy_stream_));
  const size_t bytes = layout_.BlockBytes();
  for (const BlockCopy& c : copies) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<void*>(BlockDevicePointer(c.device_block)),
                                         c.host, bytes, cudaMemcpyHostToDevice, copy_stream_));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(end, copy_stream_));
  prefetches_in_flight_.push_back({start, end, static_cast<int64_t>(bytes * copies.size())});
  prefetch_since_wait_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::WaitForPrefetches() {
  if (!prefetch_since_wait_) return absl::OkStatus();
  prefetch_since_wait_ = false;
  if (pending_wait_mark_ == nullptr) {
    ASSIGN_OR_RETURN(pending_wait_mark_, TakeEvent());
  }
  // Re-recording moves the mark past every copy enqueued so far on the copy stream.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(pending_wait_mark_, copy_stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ApplyPrefetchWait() {
  if (pending_wait_mark_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(cudaEvent_t ready, TakeEvent());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, pending_wait_mark_, 0));
  stalls_in_flight_.push_back({ready, pending_wait_mark_});
  pending_wait_mark_ = nullptr;
  return absl::OkStatus();
}

absl::Status CudaBackend::HarvestTimings(bool block) {
  auto done = [&](cudaEvent_t e) -> absl::StatusOr<bool> {
    if (block) {
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e));
      return true;
    }
    const cudaError_t err = cudaEventQuery(e);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    CUDA_RETURN_IF_ERROR(err);
    return true;
  };
  while (!prefetches_in_flight_.empty()) {
    const CopyTiming t = prefetches_in_flight_.front();
    ASSIGN_OR_RETURN(bool finished, done(t.end));
    if (!finished) break;
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, t.start, t.end));
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++copy_stats_.prefetch_batches;
      copy_stats_.prefetch_bytes += t.bytes;
      copy_stats_.prefetch_copy_seconds += ms * 1e-3;
    }
    event_pool_.push_back(t.start);
    event_pool_.push_back(t.end);
    prefetches_in_flight_.pop_front();
  }
  while (!stalls_in_flight_.empty()) {
    const StallTiming t = stalls_in_flight_.front();
    ASSIGN_OR_RETURN(bool ready_done, done(t.ready));
    if (!ready_done) break;
    ASSIGN_OR_RETURN(bool mark_done, done(t.mark));
    if (!mark_done) break;
    // Positive when the copies ended after the compute stream reached the wait: the
    // forward's first kernel was held back that long.
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, t.ready, t.mark));
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      copy_stats_.prefetch_stall_seconds += std::max(0.0f, ms) * 1e-3;
    }
    event_pool_.push_back(t.ready);
    event_pool_.push_back(t.mark);
    stalls_in_flight_.pop_front();
  }
  return absl::OkStatus();
}

BackendCopyStats CudaBackend::copy_stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return copy_stats_;
}

absl::Status CudaBackend::CopyBlock(int32_t src_block, int32_t dst_block) {
  RETURN_IF_ERROR(ValidateBlock(src_block));
  RETURN_IF_ERROR(ValidateBlock(dst_block));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<void*>(BlockDevicePointer(dst_block)),
                                       BlockDevicePointer(src_block), layout_.BlockBytes(),
                                       cudaMemcpyDeviceToDevice, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaBackend::AllocateHostMemory(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocMapped);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("cudaHostAlloc of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(err)));
  }
  return ptr;
}

void CudaBackend::FreeHostMemory(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

// Called from the KV manager's pinning thread: only the runtime (thread-safe), no member.
// Mapped: attention streams host-resident blocks by reading them from the device
// (host_kv_stream.h).
absl::Status CudaBackend::PinHostMemory(void* ptr, size_t bytes) {
  const cudaError_t err = cudaHostRegister(ptr, bytes, cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("cudaHostRegister of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

void CudaBackend::UnpinHostMemory(void* ptr, size_t) {
  if (ptr != nullptr) cudaHostUnregister(ptr);
}

absl::StatusOr<int64_t> CudaBackend::StartCopiesToHost(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(ValidateBlock(c.device_block));
  RETURN_IF_ERROR(HarvestAsyncCopies());
  // Two timing events per batch from the Init-time pool; when it runs dry, the oldest batch
  // is waited for (counted as a stall) instead of creating events while stepping.
  while (event_pool_.size() < 2 && !async_out_in_flight_.empty()) {
    RETURN_IF_ERROR(WaitForCopies(async_out_in_flight_.front().ticket));
  }
  ASSIGN_OR_RETURN(cudaEvent_t start, TakeEvent());
  absl::StatusOr<cudaEvent_t> end = TakeEvent();
  if (!end.ok()) {
    event_pool_.push_back(start);
    return end.status();
  }
  auto enqueue = [&]() -> absl::Status {
    // The blocks hold what the last forward wrote (compute_done_); on the copy stream this
    // also follows every prefetch already started (their host buffers may be reused here).
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start, copy_stream_));
    const size_t bytes = layout_.BlockBytes();
    // One copy per block: consecutive host bytes may belong to two host registrations
    // (the host tier is pinned a chunk at a time), and a copy straddling two is refused.
    for (const BlockCopy& c : copies) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(c.host, BlockDevicePointer(c.device_block), bytes, cudaMemcpyDeviceToHost, copy_stream_));
    }
    CUDA_RETURN_IF_ERROR(cudaEventRecord(*end, copy_stream_));
    return absl::OkStatus();
  };
  if (absl::Status s = enqueue(); !s.ok()) {
    event_pool_.push_back(start);
    event_pool_.push_back(*end);
    return s;
  }
  const int64_t ticket = next_async_ticket_++;
  async_out_in_flight_.push_back(
      {ticket, start, *end, static_cast<int64_t>(layout_.BlockBytes() * copies.size())});
  return ticket;
}

absl::StatusOr<bool> CudaBackend::CopiesDone(int64_t ticket) {
  if (ticket <= 0 || ticket >= next_async_ticket_) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: unknown copy ticket ", ticket));
  }
  RETURN_IF_ERROR(HarvestAsyncCopies());
  return ticket <= async_done_through_;
}

absl::Status CudaBackend::WaitForCopies(int64_t ticket) {
  ASSIGN_OR_RETURN(bool done, CopiesDone(ticket));
  if (done) return absl::OkStatus();
  const auto wait_start = std::chrono::steady_clock::now();
  // Batches complete in order on the copy stream: waiting for this one covers the earlier.
  for (const AsyncCopyBatch& b : async_out_in_flight_) {
    if (b.ticket == ticket) {
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b.end));
      break;
    }
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    copy_stats_.async_out_wait_seconds += waited;
  }
  return HarvestAsyncCopies();
}

absl::Status CudaBackend::HarvestAsyncCopies() {
  while (!async_out_in_flight_.empty()) {
    const AsyncCopyBatch b = async_out_in_flight_.front();
    const cudaError_t err = cudaEventQuery(b.end);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      break;
    }
    CUDA_RETURN_IF_ERROR(err);
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, b.start, b.end));
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++copy_stats_.async_out_batches;
      copy_stats_.async_out_bytes += b.bytes;
      copy_stats_.async_out_copy_seconds += std::max(0.0f, ms) * 1e-3;
    }
    event_pool_.push_back(b.start);
    event_pool_.push_back(b.end);
    async_done_through_ = b.ticket;
    async_out_in_flight_.pop_front();
  }
  return absl::OkStatus();
}

}  // namespace kvtier
