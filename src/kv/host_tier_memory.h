// HostTierMemory: the host tier's bytes — one reserved region from the backend, pinned in
// the background a chunk at a time (ChunkedPreparer) where the backend pins host memory,
// so that creating a context costs the same whatever the tier's size. Its blocks are
// usable as their chunk is pinned: ready_bytes() is the pinned prefix.
// Thread-safe: ready_bytes()/done()/status() from any thread; the rest from the owner.
#ifndef KVTIER_KV_HOST_TIER_MEMORY_H_
#define KVTIER_KV_HOST_TIER_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/chunked_preparer.h"
#include "kv/page_populator.h"

namespace kvtier {

class Backend;

// How a host tier is pinned: its first `bytes_at_start` by StartPinning itself before it
// returns (a context's creation: nothing steps yet, so no device call waits behind them;
// the first requests find that many bytes of loads' and swaps' room), the rest in the
// background at most `bytes_per_second` fast (0: as fast as the backend pins).
struct HostPinSchedule {
  size_t bytes_at_start = 0;
  double bytes_per_second = 0;
};

class HostTierMemory {
 public:
  // Reserves `bytes` (rounded up to whole pages) through the backend and, when the backend
  // pins host memory, pins it in chunks of about `chunk_bytes` from the start, on a
  // background thread started now or, with start_pinning false, by StartPinning();
  // otherwise the whole region is ready at once. A chunk is a whole number of pages and of
  // `block_bytes`: each pin is its own registration (CUDA), and a copy whose host bytes
  // straddle two registrations is refused, so no block may. `schedule`: the part pinned at
  // start, and the pace of the rest (a chunk's pin starts no sooner than its predecessor's
  // start plus that chunk's bytes at that speed). `backend` must outlive the result.
  // ResourceExhausted when the address space cannot be reserved.
  static absl::StatusOr<std::unique_ptr<HostTierMemory>> Create(Backend* backend, size_t bytes, size_t chunk_bytes,
                                                                size_t block_bytes = 1, bool start_pinning = true,
                                                                HostPinSchedule schedule = {});
  // Cancels the pinning (waiting for the chunk being pinned), unpins every pinned chunk and
  // releases the region.
  ~HostTierMemory();
  HostTierMemory(const HostTierMemory&) = delete;
  HostTierMemory& operator=(const HostTierMemory&) = delete;

  uint8_t* base() const { return base_; }
  size_t bytes() const { return bytes_; }  // whole pages, >= the requested size
  // The prefix [0, ready_bytes()) may be copied to and from (acquire: pinned).
  size_t ready_bytes() const;
  // Pinning has ended: everything is ready, or it failed (status()), or was cancelled.
  bool done() const { return !pins_ || (pinning_ != nullptr && pinning_->done()); }
  // Why pinning stopped early (the backend's error); OK otherwise. The part pinned before
  // stays usable; the rest of the region is never used.
  absl::Status status() const {
    if (!start_status_.ok()) return start_status_;
    return pinning_ == nullptr ? absl::OkStatus() : pinning_->status();
  }
  // Pins the schedule's first bytes, then starts the pinning thread for the rest (once;
  // nothing when it runs or the backend does not pin). Pinning (CUDA: cudaHostRegister)
  // holds the driver's lock for each chunk, so a context starts it once its own device work
  // (weights, warm-up) is done; other threads page the chunks in ahead of their pins
  // (PagePopulator) and the pinning thread paces its pins, so that a stepping thread's
  // device calls wait for at most one small chunk, and seldom.
  void StartPinning();
  // Holds the pinning back after the chunk being pinned, until ResumePinning: while a
  // caller's own device calls must not wait behind pins (CUDA's driver lock).
  void PausePinning() {
    if (pinning_ != nullptr) pinning_->Pause();
  }
  void ResumePinning() {
    if (pinning_ != nullptr) pinning_->Resume();
  }
  // Stops pinning before the next chunk; returns at once (freeing a context starts here).
  void CancelPinning() {
    if (pinning_ != nullptr) pinning_->Cancel();
  }
  // Blocks until done() (tests; a caller that needs the whole tier before it starts);
  // starts the pinning first if it was not started.
  void WaitUntilDone() {
    StartPinning();
    if (pinning_ != nullptr) pinning_->Wait();
  }

 private:
  HostTierMemory(Backend* backend, uint8_t* base, size_t bytes, size_t chunk_bytes, HostPinSchedule schedule);
  absl::Status PinChunk(size_t begin, size_t end, bool paced);

  Backend* const backend_;
  uint8_t* const base_;
  const size_t bytes_;
  const size_t chunk_bytes_;
  const HostPinSchedule schedule_;
  absl::Status start_status_;                 // a pin at start refused (the rest is never pinned)
  const bool pins_;                           // the backend pins host memory
  std::unique_ptr<PagePopulator> populator_;  // pages chunks in ahead of pinning_ (null with it)
  std::unique_ptr<ChunkedPreparer> pinning_;  // null until started, and when the backend does not pin
};

}  // namespace kvtier

#endif  // KVTIER_KV_HOST_TIER_MEMORY_H_
