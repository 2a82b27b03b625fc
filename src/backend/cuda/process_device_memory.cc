// ReadProcessDeviceBytes (process_device_memory.h): NVML through dlopen, so the module
// needs no NVML at build time and loads where the driver ships none.
#include "backend/cuda/process_device_memory.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kvtier::cuda {
namespace {

// The slice of NVML's C ABI used here (nvml.h is not part of the CUDA toolkit's headers).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;
struct NvmlProcessInfo {  // nvmlProcessInfo_v2_t, which the _v3 query fills
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

class Nvml {
 public:
  static Nvml& Get() {
    static Nvml* nvml = new Nvml();  // never destroyed: other threads may still call it at exit
    return *nvml;
  }

  // Bytes NVML counts for this process on the device with PCI bus id `bus_id`, or -1.
  int64_t ProcessBytes(const char* bus_id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ok_) return -1;
    NvmlDevice device = nullptr;
    if (get_handle_(bus_id, &device) != kNvmlSuccess) return -1;
    std::array<NvmlProcessInfo, 256> infos{};
    unsigned int count = static_cast<unsigned int>(infos.size());
    const NvmlReturn r = get_processes_(device, &count, infos.data());
    if (r != kNvmlSuccess && r != kNvmlInsufficientSize) return -1;
    const unsigned int pid = static_cast<unsigned int>(getpid());
    for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
      if (infos[i].pid != pid) continue;
      if (infos[i].used_gpu_memory == kNvmlValueNotAvailable) return -1;
      return static_cast<int64_t>(infos[i].used_gpu_memory);
    }
    return -1;  // not listed: a process namespace NVML does not see into
  }

 private:
  Nvml() {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) return;
    auto init = reinterpret_cast<NvmlReturn (*)()>(dlsym(library_, "nvmlInit_v2"));
    get_handle_ = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
        dlsym(library_, "nvmlDeviceGetHandleByPciBusId_v2"));
    get_processes_ = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*)>(
        dlsym(library_, "nvmlDeviceGetComputeRunningProcesses_v3"));
    ok_ = init != nullptr && get_handle_ != nullptr && get_processes_ != nullptr && init() == kNvmlSuccess;
  }

  std::mutex mu_;
  void* library_ = nullptr;
  NvmlReturn (*get_handle_)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*get_processes_)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  bool ok_ = false;
};

}  // namespace

absl::StatusOr<ProcessDeviceBytes> ReadProcessDeviceBytes() {
  int device = 0;
  char bus_id[32] = {};
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id)), device) == cudaSuccess) {
    const int64_t bytes = Nvml::Get().ProcessBytes(bus_id);
    if (bytes >= 0) return ProcessDeviceBytes{bytes, true};
  }
  cudaGetLastError();
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("cudaMemGetInfo: ", cudaGetErrorString(err)));
  }
  return ProcessDeviceBytes{static_cast<int64_t>(total_bytes - free_bytes), false};
}

}  // namespace kvtier::cuda
