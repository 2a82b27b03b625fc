// The device side of GemvFusion (gemv_fusion.h), shared by the decode GEMV kernels
// (gemv_kernel.cuh, fp8_gemv_rows.cuh): the norm of the input rows into shared memory and the
// residual add of the output.
#ifndef KVTIER_BACKEND_CUDA_GEMV_FUSION_CUH_
#define KVTIER_BACKEND_CUDA_GEMV_FUSION_CUH_

#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/gemv_fusion.h"
#include "backend/cuda/rms_norm_row.cuh"

namespace kvtier::cuda::gemv {

// AddRmsNorm's block shape (kernels.cu: 256 threads, up to 2 chunks of 8 per thread for
// rows up to kGemvNormMaxK): the same shape computes the same bits.
constexpr int kNormThreads = 256;
constexpr int kNormChunks = kGemvNormMaxK / (8 * kNormThreads);

// The norm weights of this thread's chunks; before the PDL wait. Unused unless kNormIn.
template <GemvEnd E>
__device__ __forceinline__ void LoadFusionWeights(const GemvFusion& f, int k, float (&wt)[kNormChunks][8]) {
  if constexpr (E == GemvEnd::kNormIn) LoadNormWeights<kNormChunks, kNormThreads>(f.norm_weight, k, wt);
}

// After the PDL wait, with every thread of the block (blockDim.x == kNormThreads): the R
// residual rows (R, k) normed into sx (R, k) T in shared memory, visible to the whole block.
template <typename T, int R>
__device__ __forceinline__ void NormRowsToShared(const GemvFusion& f, int k, const float (&wt)[kNormChunks][8],
                                                 T* sx) {
  const int chunks = k / 8;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float y[kNormChunks][8];
    NormRowLoaded<T, kNormChunks, kNormThreads>(f.residual + static_cast<int64_t>(r) * k, static_cast<const T*>(nullptr),
                                                wt, k, f.norm_eps, y);
#pragma unroll
    for (int j = 0; j < kNormChunks; ++j) {
      const int c = threadIdx.x + j * kNormThreads;
      if (c < chunks) reinterpret_cast<uint4*>(sx + static_cast<int64_t>(r) * k)[c] = Pack8<T>(y[j]);
    }
  }
  __syncthreads();
}

// A 16-byte piece of the input rows: through the read-only cache from global memory, or a
// plain load from the normed rows in shared memory (kNormIn).
template <bool kShared>
__device__ __forceinline__ uint4 LoadInput(const uint4* p) {
  if constexpr (kShared) {
    return *p;
  } else {
    return __ldg(p);
  }
}

// The output value v (fp32) of row `row`, column `col` of an (R, n) result: residual[row, col]
// += v rounded to T, as AddRmsNorm adds a T projection output.
template <typename T>
__device__ __forceinline__ void AddToResidual(const GemvFusion& f, int64_t at, float v) {
  f.residual[at] += ToFloat(FromFloat<T>(v));
}

}  // namespace kvtier::cuda::gemv

#endif  // KVTIER_BACKEND_CUDA_GEMV_FUSION_CUH_
