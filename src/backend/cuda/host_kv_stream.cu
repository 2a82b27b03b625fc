// GatherHostKv (see host_kv_stream.h). Each thread moves 4 x 16 bytes per iteration with all
// four loads issued before the stores, so a CTA of 256 threads keeps 16 KiB of host reads
// in flight: host memory latency (~1-2 us over PCIe) times the link's bandwidth is far less
// than a few such CTAs per SM.
#include "backend/cuda/host_kv_stream.h"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

__global__ void __launch_bounds__(kThreads) GatherHostKvKernel(HostKvGather g) {
  // 32-bit index arithmetic (the launcher checks the total fits): a 64-bit division per
  // 16 bytes would cost more than the copy.
  const uint32_t vec_per_slice = static_cast<uint32_t>(g.slice_bytes / 16);
  const uint32_t total = vec_per_slice * static_cast<uint32_t>(g.num_slices);
  const uint32_t stride = gridDim.x * kThreads * kUnroll;
  uint4* dst = static_cast<uint4*>(g.staged);
  for (uint32_t base = blockIdx.x * kThreads * kUnroll + threadIdx.x; base < total; base += stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + static_cast<uint32_t>(u) * kThreads;
      if (i < total) {
        const uint32_t slice = i / vec_per_slice, within = i - slice * vec_per_slice;
        const uint4* src = reinterpret_cast<const uint4*>(g.blocks[slice] + g.layer_offset);
        v[u] = __ldcs(src + within);  // read once: bypass L1
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + static_cast<uint32_t>(u) * kThreads;
      if (i < total) dst[i] = v[u];
    }
  }
}

}  // namespace

cudaError_t GatherHostKv(const HostKvGather& gather, int32_t ctas, cudaStream_t stream) {
  if (gather.num_slices <= 0) return cudaSuccess;
  if (gather.slice_bytes % 16 != 0 || gather.layer_offset % 16 != 0) return cudaErrorInvalidValue;
  const size_t total = gather.slice_bytes / 16 * static_cast<size_t>(gather.num_slices);
  if (total + static_cast<size_t>(kThreads) * kUnroll * 2 >= (size_t{1} << 31)) return cudaErrorInvalidValue;
  const size_t per_cta = static_cast<size_t>(kThreads) * kUnroll;
  const size_t needed = (total + per_cta - 1) / per_cta;
  const int grid = static_cast<int>(needed < static_cast<size_t>(ctas) ? needed : static_cast<size_t>(ctas));
  GatherHostKvKernel<<<grid > 0 ? grid : 1, kThreads, 0, stream>>>(gather);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
