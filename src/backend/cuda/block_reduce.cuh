// Reductions over a warp and over a thread block, for kernels that give one block a row.
// blockDim.x must be a multiple of 32 and at most 1024; every thread gets the result.
#ifndef KVTIER_BACKEND_CUDA_BLOCK_REDUCE_CUH_
#define KVTIER_BACKEND_CUDA_BLOCK_REDUCE_CUH_

namespace kvtier::cuda {

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Op(a, b) combines two partial results; `identity` is what an absent warp contributes.
template <typename Op>
__device__ __forceinline__ float BlockReduce(float v, float identity, Op op) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = op(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float x = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : identity;
    x = op(x);
    if (lane == 0) total = x;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // the shared slots may be reused by the next reduction
  return result;
}

__device__ __forceinline__ float BlockSum(float v) {
  return BlockReduce(v, 0.0f, [](float x) { return WarpSum(x); });
}

// Of non-negative values (an absent warp counts as 0). max is exact: any reduction order gives
// the same result.
__device__ __forceinline__ float BlockMax(float v) {
  return BlockReduce(v, 0.0f, [](float x) { return WarpMax(x); });
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_BLOCK_REDUCE_CUH_
