// TierCopies (see tier_copies.h).
#include "backend/cuda/tier_copies.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

absl::StatusOr<std::unique_ptr<TierCopies>> TierCopies::Create(cudaStream_t compute, const DeviceKvPool* pool,
                                                               CopyStatsBoard* stats) {
  std::unique_ptr<TierCopies> copies(new TierCopies(compute, pool, stats));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copies->copy_stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&copies->compute_done_, cudaEventDisableTiming));
  // The two of the synchronous copies, then the pool that prefetches, stalls and async
  // batches in flight take theirs from.
  constexpr int kTimingEvents = 514;
  for (int i = 0; i < kTimingEvents; ++i) {
    cudaEvent_t e = nullptr;
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    copies->all_events_.push_back(e);
  }
  copies->sync_start_ = copies->all_events_[0];
  copies->sync_end_ = copies->all_events_[1];
  copies->event_pool_.assign(copies->all_events_.begin() + 2, copies->all_events_.end());
  return copies;
}

TierCopies::~TierCopies() {
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  for (cudaEvent_t e : all_events_) cudaEventDestroy(e);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
}

absl::Status TierCopies::RecordForwardDone() {
  CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_done_, compute_));
  return absl::OkStatus();
}

absl::Status TierCopies::CopySync(std::span<const BlockCopy> copies, cudaMemcpyKind kind) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(pool_->Validate(c.device_block));
  if (copies.empty()) return absl::OkStatus();
  // After the last forward (compute_done_) and, on the copy stream, after every prefetch.
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  const size_t bytes = pool_->block_bytes;
  CUDA_RETURN_IF_ERROR(cudaEventRecord(sync_start_, copy_stream_));
  for (const BlockCopy& c : copies) {
    void* dev = pool_->Block(c.device_block);
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
  stats_->Update([&](BackendCopyStats& s) {
    ++s.sync_batches;
    s.sync_bytes += static_cast<int64_t>(bytes * copies.size());
    s.sync_copy_seconds += ms * 1e-3;
  });
  return absl::OkStatus();
}

absl::StatusOr<cudaEvent_t> TierCopies::TakeEvent() {
  if (event_pool_.empty()) RETURN_IF_ERROR(HarvestTimings(/*block=*/true));
  if (event_pool_.empty()) return absl::InternalError("cuda backend: timing event pool exhausted");
  cudaEvent_t e = event_pool_.back();
  event_pool_.pop_back();
  return e;
}

absl::Status TierCopies::Prefetch(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(pool_->Validate(c.device_block));
  if (copies.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(cudaEvent_t start, TakeEvent());
  ASSIGN_OR_RETURN(cudaEvent_t end, TakeEvent());
  // The destination blocks were free: the last forward (compute_done_) is their last reader.
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(start, copy_stream_));
  const size_t bytes = pool_->block_bytes;
  for (const BlockCopy& c : copies) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pool_->Block(c.device_block), c.host, bytes, cudaMemcpyHostToDevice, copy_stream_));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(end, copy_stream_));
  prefetches_in_flight_.push_back({start, end, static_cast<int64_t>(bytes * copies.size())});
  prefetch_since_wait_ = true;
  return absl::OkStatus();
}

absl::Status TierCopies::MarkPrefetches() {
  if (!prefetch_since_wait_) return absl::OkStatus();
  prefetch_since_wait_ = false;
  if (pending_wait_mark_ == nullptr) {
    ASSIGN_OR_RETURN(pending_wait_mark_, TakeEvent());
  }
  // Re-recording moves the mark past every copy enqueued so far on the copy stream.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(pending_wait_mark_, copy_stream_));
  return absl::OkStatus();
}

absl::Status TierCopies::ApplyPrefetchWait() {
  if (pending_wait_mark_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(cudaEvent_t ready, TakeEvent());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, pending_wait_mark_, 0));
  stalls_in_flight_.push_back({ready, pending_wait_mark_});
  pending_wait_mark_ = nullptr;
  return absl::OkStatus();
}

absl::Status TierCopies::HarvestTimings(bool block) {
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
    stats_->Update([&](BackendCopyStats& s) {
      ++s.prefetch_batches;
      s.prefetch_bytes += t.bytes;
      s.prefetch_copy_seconds += ms * 1e-3;
    });
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
    stats_->Update([&](BackendCopyStats& s) { s.prefetch_stall_seconds += std::max(0.0f, ms) * 1e-3; });
    event_pool_.push_back(t.ready);
    event_pool_.push_back(t.mark);
    stalls_in_flight_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status TierCopies::CopyBlock(int32_t src_block, int32_t dst_block) {
  RETURN_IF_ERROR(pool_->Validate(src_block));
  RETURN_IF_ERROR(pool_->Validate(dst_block));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pool_->Block(dst_block), pool_->Block(src_block), pool_->block_bytes,
                                       cudaMemcpyDeviceToDevice, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TierCopies::StartToHost(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(pool_->Validate(c.device_block));
  RETURN_IF_ERROR(HarvestAsyncCopies());
  // Two timing events per batch from the Init-time pool; when it runs dry, the oldest batch
  // is waited for (counted as a stall) instead of creating events while stepping.
  while (event_pool_.size() < 2 && !async_out_in_flight_.empty()) {
    RETURN_IF_ERROR(Wait(async_out_in_flight_.front().ticket));
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
    const size_t bytes = pool_->block_bytes;
    // One copy per block: consecutive host bytes may belong to two host registrations
    // (the host tier is pinned a chunk at a time), and a copy straddling two is refused.
    for (const BlockCopy& c : copies) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(c.host, pool_->Block(c.device_block), bytes, cudaMemcpyDeviceToHost, copy_stream_));
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
  async_out_in_flight_.push_back({ticket, start, *end, static_cast<int64_t>(pool_->block_bytes * copies.size())});
  return ticket;
}

absl::StatusOr<bool> TierCopies::Done(int64_t ticket) {
  if (ticket <= 0 || ticket >= next_async_ticket_) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: unknown copy ticket ", ticket));
  }
  RETURN_IF_ERROR(HarvestAsyncCopies());
  return ticket <= async_done_through_;
}

absl::Status TierCopies::Wait(int64_t ticket) {
  ASSIGN_OR_RETURN(bool done, Done(ticket));
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
  stats_->Update([&](BackendCopyStats& s) { s.async_out_wait_seconds += waited; });
  return HarvestAsyncCopies();
}

absl::Status TierCopies::HarvestAsyncCopies() {
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
    stats_->Update([&](BackendCopyStats& s) {
      ++s.async_out_batches;
      s.async_out_bytes += b.bytes;
      s.async_out_copy_seconds += std::max(0.0f, ms) * 1e-3;
    });
    event_pool_.push_back(b.start);
    event_pool_.push_back(b.end);
    async_done_through_ = b.ticket;
    async_out_in_flight_.pop_front();
  }
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
