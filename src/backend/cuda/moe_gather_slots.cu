// MoeGatherSlots (moe_library.h): the routes' rows in slot order, 16 bytes a thread.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/moe_library.h"

namespace kvtier::cuda {
namespace {

__global__ void GatherSlotsKernel(const uint4* __restrict__ rows, const int32_t* __restrict__ slot_token,
                                  int64_t routes, int64_t pieces_per_row, uint4* __restrict__ out) {
  const int64_t total = routes * pieces_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = i / pieces_per_row, piece = i - slot * pieces_per_row;
    out[i] = rows[static_cast<int64_t>(slot_token[slot]) * pieces_per_row + piece];
  }
}

}  // namespace

template <typename T>
cudaError_t MoeGatherSlots(const T* rows, const int32_t* slot_token, int routes, int k, T* out, cudaStream_t stream) {
  if (rows == nullptr || slot_token == nullptr || out == nullptr || routes < 1 || k < 8 || k % 8 != 0 ||
      reinterpret_cast<uintptr_t>(rows) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t pieces = static_cast<int64_t>(routes) * (k / 8);
  const int threads = 256;
  const int64_t blocks = (pieces + threads - 1) / threads;
  GatherSlotsKernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), threads, 0, stream>>>(
      reinterpret_cast<const uint4*>(rows), slot_token, routes, k / 8, reinterpret_cast<uint4*>(out));
  return cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T) \
  template cudaError_t MoeGatherSlots<T>(const T*, const int32_t*, int, int, T*, cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
