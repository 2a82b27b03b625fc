// NormRowInRegisters: one row of AddRmsNorm (kernels.h) computed into registers, for kernels
// that give a CTA of kThreads threads one row and then store it their own way (16-bit, or
// quantized: fp8_activations.cu). dim % 8 == 0 and dim <= kThreads * 8 * J.
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

// The threads a CTA norms one row with, in AddRmsNorm and the kernels that fuse it (the sum of
// squares is reduced in their order, so each must use this many to get AddRmsNorm's bits).
inline constexpr int kNormRowThreads = 256;

// Row r (residual row row_map[r] when row_map is set): residual += add (when add is set,
// written back if kStoreSum), then y = weight * residual * rsqrt(mean(residual^2) + eps).
// Thread t holds chunks c = t + j * kThreads (8 elements each) in y[j]; other entries of y are
// unset. A kernel whose CTAs all norm the same row passes kStoreSum false, so that none
// overwrites the residual another still reads, and stores the sum once (AddResidualRow).
template <typename T, bool kEarly, int J, int kThreads, bool kStoreSum>
__device__ __forceinline__ void NormRowAt(int64_t r, float* residual, const T* add, const float* weight,
                                          const int32_t* row_map, int dim, float eps, float (&y)[J][8]) {
  const int chunks = dim / 8;
  float wt[J][8];
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
  const int64_t s = row_map != nullptr ? row_map[r] : r;
  PdlEnter<kEarly>();
  float4* x = reinterpret_cast<float4*>(residual + s * dim);
  const uint4* a = add != nullptr ? reinterpret_cast<const uint4*>(add + s * dim) : nullptr;
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
        if constexpr (kStoreSum) {
          x[2 * c] = make_float4(y[j][0], y[j][1], y[j][2], y[j][3]);
          x[2 * c + 1] = make_float4(y[j][4], y[j][5], y[j][6], y[j][7]);
        }
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

// Row blockIdx.x, the residual sum written back: AddRmsNorm's row.
template <typename T, bool kEarly, int J, int kThreads>
__device__ __forceinline__ void NormRowInRegisters(float* residual, const T* add, const float* weight,
                                                   const int32_t* row_map, int dim, float eps, float (&y)[J][8]) {
  NormRowAt<T, kEarly, J, kThreads, true>(blockIdx.x, residual, add, weight, row_map, dim, eps, y);
}

// residual[r] += add[r] over the row, by every thread of the CTA in 8-element chunks: the sum
// NormRowAt<..., false> left unstored, the same fp32 additions.
template <typename T>
__device__ __forceinline__ void AddResidualRow(int64_t r, float* residual, const T* add, int dim) {
  float4* x = reinterpret_cast<float4*>(residual + r * dim);
  const uint4* a = reinterpret_cast<const uint4*>(add + r * dim);
  for (int c = threadIdx.x; c < dim / 8; c += blockDim.x) {
    float f[8];
    Unpack8<T>(a[c], f);
    float4 lo = x[2 * c], hi = x[2 * c + 1];
    lo.x += f[0], lo.y += f[1], lo.z += f[2], lo.w += f[3];
    hi.x += f[4], hi.y += f[5], hi.z += f[6], hi.w += f[7];
    x[2 * c] = lo;
    x[2 * c + 1] = hi;
  }
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_RMS_NORM_ROW_CUH_
