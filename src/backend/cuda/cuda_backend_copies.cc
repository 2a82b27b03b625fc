// CudaBackend's asynchronous device -> host tier copies (Backend::StartCopiesToHost):
// swap-outs and prefix-cache write-backs run on the copy stream while the compute stream
// runs forwards; the KV manager polls tickets and consumes the host bytes once landed.
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
    // Runs of consecutive blocks into consecutive host bytes go as one copy.
    for (size_t i = 0; i < copies.size();) {
      size_t n = 1;
      while (i + n < copies.size() && copies[i + n].device_block == copies[i].device_block + static_cast<int32_t>(n) &&
             static_cast<uint8_t*>(copies[i + n].host) == static_cast<uint8_t*>(copies[i].host) + n * bytes) {
        ++n;
      }
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(copies[i].host, BlockDevicePointer(copies[i].device_block), n * bytes,
                                           cudaMemcpyDeviceToHost, copy_stream_));
      i += n;
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
