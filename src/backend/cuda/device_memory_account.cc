// DeviceMemoryAccount (device_memory_account.h).
#include "backend/cuda/device_memory_account.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "backend/cuda/process_device_memory.h"
#include "common/log.h"

namespace kvtier::cuda {
namespace {

// Buffers of every live account in the process: what a measurement subtracts from the
// process's figure to find what no account's buffers explain.
std::mutex& TallyMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
int64_t& LiveBufferBytes() {
  static int64_t bytes = 0;
  return bytes;
}
void AddLiveBufferBytes(int64_t delta) {
  std::lock_guard<std::mutex> lock(TallyMutex());
  LiveBufferBytes() += delta;
}

constexpr int64_t kMiB = int64_t{1} << 20;

}  // namespace

void DeviceMemoryAccount::FreeAll() {
  for (void* p : buffers_) cudaFree(p);
  AddLiveBufferBytes(-buffer_bytes_);
  buffers_.clear();
  buffer_sizes_.clear();
  buffer_bytes_ = 0;
}

absl::StatusOr<void*> DeviceMemoryAccount::Allocate(size_t bytes, const char* what) {
  if (limit_bytes_ > 0 && bytes_in_use() + static_cast<int64_t>(bytes) > limit_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: ", what, " needs ", bytes, " bytes; ",
                                                     bytes_in_use(), " already counted (", runtime_share_,
                                                     " of them the process's runtime share), limit ", limit_bytes_));
  }
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda backend: cudaMalloc of ", bytes, " bytes for ", what, " failed: ", cudaGetErrorString(err)));
  }
  buffers_.push_back(ptr);
  buffer_sizes_.push_back(bytes);
  buffer_bytes_ += static_cast<int64_t>(bytes);
  AddLiveBufferBytes(static_cast<int64_t>(bytes));
  if (init_done_) ++allocations_after_init_;
  return ptr;
}

void DeviceMemoryAccount::Free(void* buffer) {
  if (buffer == nullptr) return;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i] != buffer) continue;
    cudaFree(buffer);
    buffer_bytes_ -= static_cast<int64_t>(buffer_sizes_[i]);
    AddLiveBufferBytes(-static_cast<int64_t>(buffer_sizes_[i]));
    buffers_.erase(buffers_.begin() + static_cast<std::ptrdiff_t>(i));
    buffer_sizes_.erase(buffer_sizes_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

absl::Status DeviceMemoryAccount::MeasureRuntimeShare() {
  // Work still queued could be holding memory the figure should show (a graph being
  // instantiated, a module being loaded): measure a settled device.
  cudaDeviceSynchronize();
  cudaGetLastError();
  std::lock_guard<std::mutex> lock(TallyMutex());
  absl::StatusOr<ProcessDeviceBytes> process = ReadProcessDeviceBytes();
  if (!process.ok()) return process.status();
  per_process_ = process->per_process;
  runtime_share_ = std::max(runtime_share_, std::max<int64_t>(0, process->bytes - LiveBufferBytes()));
  RaisePeak(process->bytes);
  return absl::OkStatus();
}

void DeviceMemoryAccount::SampleProcess() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_sample_ < std::chrono::seconds(1)) return;
  last_sample_ = now;
  absl::StatusOr<ProcessDeviceBytes> process = ReadProcessDeviceBytes();
  if (process.ok()) RaisePeak(process->bytes);
}

void DeviceMemoryAccount::RaisePeak(int64_t bytes) {
  if (bytes > process_peak_bytes_.load(std::memory_order_relaxed)) {
    process_peak_bytes_.store(bytes, std::memory_order_relaxed);
  }
}

void DeviceMemoryAccount::Trace(const char* stage) const {
  if (!LogEnabled(LogLevel::kDebug)) return;
  absl::StatusOr<ProcessDeviceBytes> process = ReadProcessDeviceBytes();
  size_t stack = 0;
  cudaDeviceGetLimit(&stack, cudaLimitStackSize);
  cudaGetLastError();
  int64_t live = 0;
  {
    std::lock_guard<std::mutex> lock(TallyMutex());
    live = LiveBufferBytes();
  }
  Log(LogLevel::kDebug, "gpu memory: ", stage, ": process ",
      process.ok() ? absl::StrCat(process->bytes / kMiB, " MiB", process->per_process ? "" : " (device-wide)")
                   : std::string(process.status().message()),
      ", buffers of live backends ", live / kMiB, " MiB; this backend: buffers ", buffer_bytes_ / kMiB,
      " MiB, reserved ", reserved_bytes_ / kMiB, " MiB, runtime share ", runtime_share_ / kMiB, " MiB, limit ",
      limit_bytes_ / kMiB, " MiB; stack limit ", stack, " B/thread");
}

}  // namespace kvtier::cuda
