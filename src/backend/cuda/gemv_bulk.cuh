// The decode GEMV with its weights through the copy engine, for matrices small enough that the
// whole grid's weights fit in the SMs' shared memory at once (Qwen3-MoE's attention projections,
// hidden 2048). gemv_kernel.cuh's Kernel holds the weights in flight in registers, a few pieces
// per lane before the PDL wait and the rest after it, so a small matrix is mostly requested only
// once the previous kernel has finished, and the kernel's ramp and tail are a large part of its
// time. Here thread 0 of each CTA asks the copy engine for the CTA's rows (one contiguous stretch
// per gate|up half) before the wait: every CTA of the grid is resident, so the whole matrix is
// requested as the kernel starts, while the previous kernel finishes. After the wait each warp
// dots its rows in shared memory with x, every lane adding pieces lane, lane + 32, ... in
// ascending order as Kernel's lanes do, with the same epilogue (Finish): the same bits.
// LaunchDecodeGemv picks this kernel where it fits and Kernel elsewhere.
#ifndef KVTIER_BACKEND_CUDA_GEMV_BULK_CUH_
#define KVTIER_BACKEND_CUDA_GEMV_BULK_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/resident_ctas.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda::gemv {

// A CTA's rows at most (kWarps rows of W halves): two CTAs an SM at least.
constexpr int64_t kBulkCtaBytes = 64 << 10;

template <typename Format, typename T, int R, int W, bool kF32Out, GateActivation A>
__global__ void __launch_bounds__(kWarps * 32)
    BulkKernel(const T* __restrict__ x, const typename Format::Element* __restrict__ w,
               const float* __restrict__ scales, int k, int n, void* out) {
  extern __shared__ uint4 staged_rows[];  // half j's row of warp v at (j * kWarps + v) * pieces
  __shared__ alignas(8) uint64_t landed;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col0 = blockIdx.x * kWarps, col = col0 + warp;
  const int columns = min(kWarps, n - col0);
  const int pieces = k / Format::kPerPiece;
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&landed));
  if (threadIdx.x == 0) {
    MbarInit(bar, 1);
    MbarInitFence();
    const uint32_t half = static_cast<uint32_t>(columns * pieces) * 16u;
    MbarExpectTx(bar, W * half);
    const uint64_t policy = EvictFirstPolicy();
#pragma unroll
    for (int j = 0; j < W; ++j) {
      BulkLoad(static_cast<uint32_t>(__cvta_generic_to_shared(staged_rows + j * kWarps * pieces)),
               w + (col0 + j * static_cast<int64_t>(n)) * k, half, bar, policy);
    }
  }
  const bool on = warp < columns;
  float scale[W];
  if constexpr (Format::kScaled) {
#pragma unroll
    for (int j = 0; j < W; ++j) scale[j] = on ? __ldg(scales + col + j * static_cast<int64_t>(n)) : 0.0f;
  }
  __syncthreads();  // the barrier's init, before the other threads wait on it
  PdlWait();
  PdlLaunchDependents();
  if (!on) return;
  MbarWait(bar, 0);
  float acc[W][R];
#pragma unroll
  for (int j = 0; j < W; ++j) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[j][r] = 0.0f;
  }
  for (int i = lane; i < pieces; i += 32) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
      Format::template Accumulate<R>(staged_rows[(j * kWarps + warp) * pieces + i], x, k, i, acc[j]);
    }
  }
  Finish<Format, T, R, W, kF32Out, A>(acc, scale, lane, col, n, out);
}

// BulkKernel's shared memory for rows of k, or 0 where it does not fit: a CTA's rows over
// kBulkCtaBytes, or a grid larger than the CTAs the device holds at once.
template <typename Format, typename T, int R, int W, bool kF32Out, GateActivation A>
size_t BulkSharedBytes(int k, int n) {
  const int64_t bytes = static_cast<int64_t>(W) * kWarps * k * sizeof(typename Format::Element);
  if (bytes > kBulkCtaBytes) return 0;
  static const cudaError_t opted_in = cudaFuncSetAttribute(BulkKernel<Format, T, R, W, kF32Out, A>,
                                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                           static_cast<int>(kBulkCtaBytes));
  if (opted_in != cudaSuccess) return 0;  // the register kernel runs
  const int64_t grid = (n + kWarps - 1) / kWarps;
  const auto* kernel = reinterpret_cast<const void*>(BulkKernel<Format, T, R, W, kF32Out, A>);
  return grid <= ResidentCtas(kernel, kWarps * 32, static_cast<size_t>(bytes)) ? static_cast<size_t>(bytes) : 0;
}

// BulkKernel with `shared` bytes of rows a CTA (BulkSharedBytes, not 0).
template <typename Format, typename T, int R, int W, bool kF32Out, GateActivation A>
cudaError_t LaunchBulk(const T* x, const typename Format::Element* w, const float* scales, int k, int n, void* out,
                       size_t shared, cudaStream_t stream, const CudaLaunchOptions& launch) {
  const dim3 grid((n + kWarps - 1) / kWarps);
  const cudaError_t err = LaunchPdl(launch, BulkKernel<Format, T, R, W, kF32Out, A>, grid, dim3(kWarps * 32), shared,
                                    stream, x, w, scales, k, n, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

// The decode GEMV (Kernel's semantics and requirements): BulkKernel where the matrix fits and
// launch.gemv_bulk asks for it (1) or leaves the choice (-1) for 16-bit weights, else Kernel with
// kPre pieces before the wait. Several rows of fp8 codes stay on Kernel by default (one row's
// GEMV, fp8_kernels.cu, makes its own choice between BulkKernel and fp8_gemv_rows.cuh's).
template <typename Format, typename T, int R, int W, bool kF32Out, int kPre,
          GateActivation A = GateActivation::kSilu>
cudaError_t LaunchDecodeGemv(const T* x, const typename Format::Element* w, const float* scales, int k, int n,
                             void* out, cudaStream_t stream, const CudaLaunchOptions& launch) {
  static_assert(W == 1 || !kF32Out, "gate|up writes the compute dtype");
  const bool bulk = launch.gemv_bulk == 1 || (launch.gemv_bulk < 0 && !Format::kScaled);
  const size_t shared = bulk ? BulkSharedBytes<Format, T, R, W, kF32Out, A>(k, n) : 0;
  if (shared == 0) return Launch<Format, T, R, W, kF32Out, kPre, A>(x, w, scales, k, n, out, stream, launch);
  return LaunchBulk<Format, T, R, W, kF32Out, A>(x, w, scales, k, n, out, shared, stream, launch);
}

}  // namespace kvtier::cuda::gemv

#endif  // KVTIER_BACKEND_CUDA_GEMV_BULK_CUH_
