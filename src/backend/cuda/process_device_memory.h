// How many bytes of device memory this process holds on the current CUDA device, as the
// driver counts them: NVML's per-process figure (what `nvidia-smi --query-compute-apps`
// shows), which includes what no allocation call of ours names — the CUDA context, module
// images loaded lazily, the kernels' local memory, graph executables, libraries'
// internal buffers. Without NVML (not installed, no permission, a process namespace NVML
// cannot see into) it falls back to the device's used bytes (cudaMemGetInfo), which also
// counts other processes: an over-estimate, never an under-estimate.
// Thread-safe: NVML is loaded and initialised once per process.
#ifndef KVTIER_BACKEND_CUDA_PROCESS_DEVICE_MEMORY_H_
#define KVTIER_BACKEND_CUDA_PROCESS_DEVICE_MEMORY_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace kvtier::cuda {

struct ProcessDeviceBytes {
  int64_t bytes = 0;
  // True: NVML's figure for this process; false: the whole device's used bytes.
  bool per_process = false;
};

// Reads the figure now (a few hundred microseconds with NVML: not for every step).
// Internal only when even cudaMemGetInfo fails.
absl::StatusOr<ProcessDeviceBytes> ReadProcessDeviceBytes();

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_PROCESS_DEVICE_MEMORY_H_
