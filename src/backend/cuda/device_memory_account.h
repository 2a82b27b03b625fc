// DeviceMemoryAccount: one CUDA backend's device memory, kept inside its gpu_mem_limit.
//
// What counts against the limit (docs/ARCHITECTURE.md, "GPU memory"):
// - every buffer the backend allocates (weights, workspace, KV pool), through Allocate;
// - the backend's share of what the process holds beyond anyone's buffers: the CUDA
//   context, module images (loaded lazily, on a kernel's first launch), kernels' local
//   memory, graph executables, cuBLAS's internal state. It is measured, not guessed: the
//   process's device bytes as the driver counts them (process_device_memory.h) less the
//   buffers of every live account in the process. It is measured when the backend is
//   created and again after its warm-up has launched every kernel a step uses, so
//   whatever ran before in the process — and whatever this backend loads — is inside the
//   figure the KV pool is sized from.
// Thread-safety: one owner thread; the process-wide tally of live buffers is locked.
#ifndef KVTIER_BACKEND_CUDA_DEVICE_MEMORY_ACCOUNT_H_
#define KVTIER_BACKEND_CUDA_DEVICE_MEMORY_ACCOUNT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::cuda {

class DeviceMemoryAccount {
 public:
  // limit_bytes 0: no cap (buffers are still counted).
  explicit DeviceMemoryAccount(int64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  // Frees every buffer (after the caller has synchronised the streams that use them).
  ~DeviceMemoryAccount() { FreeAll(); }
  DeviceMemoryAccount(const DeviceMemoryAccount&) = delete;
  DeviceMemoryAccount& operator=(const DeviceMemoryAccount&) = delete;

  // cudaMalloc within the limit: ResourceExhausted naming `what`, the bytes and the limit
  // when it would not fit or the device has no room.
  absl::StatusOr<void*> Allocate(size_t bytes, const char* what);
  // Frees one buffer Allocate returned (nullptr: nothing).
  void Free(void* buffer);
  // Frees every buffer; the runtime share stays (what the process loaded stays loaded).
  void FreeAll();

  // Measures the process's device bytes and sets this account's share to what they hold
  // beyond the buffers of every live account (never lowering a share measured before in
  // this account's life: a module once loaded stays). Internal when nothing can be read.
  absl::Status MeasureRuntimeShare();

  // Bytes set aside for a buffer allocated later (the KV pool's scratch block), so that
  // bytes_in_use() already covers it.
  void Reserve(int64_t bytes) { reserved_bytes_ += bytes; }
  void Unreserve(int64_t bytes) { reserved_bytes_ -= bytes; }

  // Buffers + reservations + runtime share: what counts against the limit.
  int64_t bytes_in_use() const { return buffer_bytes_ + reserved_bytes_ + runtime_share_; }
  int64_t buffer_bytes() const { return buffer_bytes_; }
  int64_t runtime_share() const { return runtime_share_; }
  int64_t limit_bytes() const { return limit_bytes_; }
  // Whether the last measurement read this process's own figure (NVML) or the device's.
  bool measured_per_process() const { return per_process_; }

  // From now on every Allocate is counted in allocations_after_init().
  void MarkInitDone() { init_done_ = true; }
  int64_t allocations_after_init() const { return allocations_after_init_; }

  // Reads the process's device bytes and keeps the largest seen, at most once a second (a
  // reading costs up to a millisecond with NVML). The process figure counts every context
  // of the process, so with several it is their sum.
  void SampleProcess();
  // Any thread.
  int64_t process_peak_bytes() const { return process_peak_bytes_.load(std::memory_order_relaxed); }

  // One debug-level log line: the stage, the process's device bytes, this account's.
  void Trace(const char* stage) const;

 private:
  const int64_t limit_bytes_;
  std::vector<void*> buffers_;
  std::vector<size_t> buffer_sizes_;
  int64_t buffer_bytes_ = 0;
  int64_t reserved_bytes_ = 0;
  int64_t runtime_share_ = 0;
  bool per_process_ = false;
  bool init_done_ = false;
  int64_t allocations_after_init_ = 0;
  std::atomic<int64_t> process_peak_bytes_{0};
  std::chrono::steady_clock::time_point last_sample_{};
  void RaisePeak(int64_t bytes);
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_DEVICE_MEMORY_ACCOUNT_H_
