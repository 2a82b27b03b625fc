// NormRowInRegisters: one row of AddRmsNorm (kernels.h) computed into registers, for kernels
// that give a CTA of kThreads threads one row and then store it their own way (16-bit, or
// quantized: fp8_activations.cu); its two halves, LoadNormWeights before the PDL wait and
// NormRowLoaded after it, for kernels that norm their own input (the decode GEMVs,
// gemv_fusion.h). dim % 8 == 0 and dim <= kThreads * 8 * J.
//
// Why this shape: on the decode path the row is short and latency-bound, so every load of
// the row goes out before any of it is used (the kernel costs one memory round trip, not one
// per loop iteration), and the norm weights and the row map (step metadata) are read before
// the PDL wait.
#ifndef KVTIER_BACKEND_CUDA_RMS_NORM_ROW_CUH_
#define KVTIER_BACKEND_CUDA_RMS_NORM_ROW_CUH_

#include <cstdint>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/elem.cuh"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {

// The norm weights of thread t's chunks c = t + j * kThreads (8 each) into wt[j]: read
// before the PDL wait (weights never depend on an earlier kernel).
template <int J, int kThreads>
__device__ __forceinline__ void LoadNormWeights(const float* weight, int dim, float (&wt)[J][8]) {
  const int chunks = dim / 8;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (c < chunks) {
      const float4 lo = __ldg(reinterpret_cast<const float4*>(weight) + 2 * c);
      const float4 hi = __ldg(reinterpret_cast<const float4*>(weight) + 2 * c + 1);
      wt[j][0] = lo.x, wt[j][1] = lo.y, wt[j][2] = lo.z, wt[j][3] = lo.w;
      wt[j][4] = hi.x, wt[j][5] = hi.y, wt[j][6] = hi.z, wt[j][7] = hi.w;
    }
  }
}

// After the wait: one fp32 residual row (row += add, written back, when add is set), then
// y = wt * row * rsqrt(mean(row^2) + eps), thread t's chunks as in LoadNormWeights; other
// entries of y are unset. Every thread of the block takes part (a block-wide sum). For a
// given J and kThreads the result does not depend on the kernel it runs in: the decode GEMVs
// that norm their own input (gemv_fusion.h) get the bits AddRmsNorm writes.
template <typename T, int J, int kThreads>
__device__ __forceinline__ void NormRowLoaded(float* row, const T* add, const float (&wt)[J][8], int dim, float eps,
                                              float (&y)[J][8]) {
  const int chunks = dim / 8;
  float4* x = reinterpret_cast<float4*>(row);
  const uint4* a = reinterpret_cast<const uint4*>(add);
  float4 lo[J], hi[J];
  uint4 av[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (c < chunks) {
      lo[j] = x[2 * c];
      hi[j] = x[2 * c + 1];
      if (a != nullptr) av[j] = a[c];
    }
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (c < chunks) {
      y[j][0] = lo[j].x, y[j][1] = lo[j].y, y[j][2] = lo[j].z, y[j][3] = lo[j].w;
      y[j][4] = hi[j].x, y[j][5] = hi[j].y, y[j][6] = hi[j].z, y[j][7] = hi[j].w;
      if (a != nullptr) {
        float f[8];
        Unpack8<T>(av[j], f);
#pragma unroll
        for (int i = 0; i < 8; ++i) y[j][i] += f[i];
        x[2 * c] = make_float4(y[j][0], y[j][1], y[j][2], y[j][3]);
        x[2 * c + 1] = make_float4(y[j][4], y[j][5], y[j][6], y[j][7]);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) sum_sq += y[j][i] * y[j][i];
    }
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (c < chunks) {
#pragma unroll
      for (int i = 0; i < 8; ++i) y[j][i] = wt[j][i] * (y[j][i] * inv_rms);
    }
  }
}

// Row blockIdx.x (residual row row_map[blockIdx.x] when row_map is set): residual += add
// (when add is set, written back), then y = weight * residual * rsqrt(mean(residual^2) +
// eps). Thread t holds chunks c = t + j * kThreads (8 elements each) in y[j]; other entries
// of y are unset.
template <typename T, bool kEarly, int J, int kThreads>
__device__ __forceinline__ void NormRowInRegisters(float* residual, const T* add, const float* weight,
                                                   const int32_t* row_map, int dim, float eps, float (&y)[J][8]) {
  const int64_t r = blockIdx.x;
  float wt[J][8];
  LoadNormWeights<J, kThreads>(weight, dim, wt);
  const int64_t s = row_map != nullptr ? row_map[r] : r;
  PdlEnter<kEarly>();
  NormRowLoaded<T, J, kThreads>(residual + s * dim, add != nullptr ? add + s * dim : nullptr, wt, dim, eps, y);
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_RMS_NORM_ROW_CUH_
