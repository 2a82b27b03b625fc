// Programmatic dependent launch (Hopper): a kernel launched with LaunchPdl may start while
// the kernel before it on the stream is still finishing, so its launch latency and the
// ramp-up of its memory traffic hide behind the previous kernel's tail. Decode steps are
// long chains of short kernels (about ten per layer), so the hidden gaps add up over a step
// (docs/CUDA_BACKEND.md, "Short kernels and programmatic dependent launch"; cuda_pdl 0
// turns it off to measure it).
//
// Contract for a kernel launched with LaunchPdl: it may read, before PdlWait(), only data
// no earlier kernel of the step writes (weights); PdlWait() returns once every earlier
// kernel has completed and its writes are visible. PdlLaunchDependents() lets the next
// kernel begin its own prologue. Most kernels call it right after PdlWait(); the short
// ones between two projections call it before (PdlEnter<true>), so the next GEMV's CTAs
// are launched while the previous GEMV is still streaming and fill its tail with their
// own weight loads. That is still safe: the next kernel's PdlWait() returns only after
// this one completed, which in turn waited for everything before it. Both are no-ops on a
// kernel launched normally and below sm_90.
#ifndef KVTIER_BACKEND_CUDA_PDL_H_
#define KVTIER_BACKEND_CUDA_PDL_H_

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda_options.h"

namespace kvtier::cuda {

__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kEarly: trigger the next kernel before waiting for the previous one (see above); launchers
// pick the kernel with kEarly = CudaLaunchOptions::pdl_early_trigger.
template <bool kEarly>
__device__ __forceinline__ void PdlEnter() {
  if constexpr (kEarly) {
    PdlLaunchDependents();
    PdlWait();
  } else {
    PdlWait();
    PdlLaunchDependents();
  }
}

// Launches `kernel` with programmatic dependent launch allowed, or plainly when launch.pdl
// is false (the kernel's PdlWait / PdlLaunchDependents are then no-ops), its CTAs in thread
// block clusters of `cluster_ctas` along x when that is above 1 (grid.x a multiple of it, sm_90+).
template <typename... KernelArgs, typename... Args>
cudaError_t LaunchPdlInClusters(const CudaLaunchOptions& launch, unsigned cluster_ctas, void (*kernel)(KernelArgs...),
                                dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = launch.pdl ? 1 : 0;
  config.attrs = attribute;
  config.numAttrs = 1;
  if (cluster_ctas > 1) {
    attribute[1].id = cudaLaunchAttributeClusterDimension;
    attribute[1].val.clusterDim.x = cluster_ctas;
    attribute[1].val.clusterDim.y = 1;
    attribute[1].val.clusterDim.z = 1;
    config.numAttrs = 2;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... KernelArgs, typename... Args>
cudaError_t LaunchPdl(const CudaLaunchOptions& launch, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                      size_t smem, cudaStream_t stream, Args&&... args) {
  return LaunchPdlInClusters(launch, 1, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_PDL_H_
