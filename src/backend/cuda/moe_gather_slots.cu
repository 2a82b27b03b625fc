// MoeGatherSlotRows and MoeSlotScales (moe_library.h): the routes' rows in slot order, 16 bytes a
// thread, and their per-row scales in MoeScaleSlot's layout.
#include <cstdint>

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

__global__ void SlotScalesKernel(const float* __restrict__ scales, const int32_t* __restrict__ slot_token,
                                 const int32_t* __restrict__ slot_expert, const int32_t* __restrict__ expert_offsets,
                                 int routes, float* __restrict__ out) {
  for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < routes; s += gridDim.x * blockDim.x) {
    const int e = slot_expert[s];
    const int first = expert_offsets[e];
    out[MoeScaleSlot(first, e) + (s - first)] = scales[slot_token != nullptr ? slot_token[s] : s];
  }
}

}  // namespace

cudaError_t MoeGatherSlotRows(const void* rows, const int32_t* slot_token, int routes, int64_t row_bytes, void* out,
                              cudaStream_t stream) {
  if (rows == nullptr || slot_token == nullptr || out == nullptr || routes < 1 || row_bytes < 16 ||
      row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(rows) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t pieces = static_cast<int64_t>(routes) * (row_bytes / 16);
  const int threads = 256;
  const int64_t blocks = (pieces + threads - 1) / threads;
  GatherSlotsKernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), threads, 0, stream>>>(
      static_cast<const uint4*>(rows), slot_token, routes, row_bytes / 16, static_cast<uint4*>(out));
  return cudaGetLastError();
}

cudaError_t MoeSlotScales(const float* scales, const int32_t* slot_token, const int32_t* slot_expert,
                          const int32_t* expert_offsets, int routes, float* out, cudaStream_t stream) {
  if (scales == nullptr || slot_expert == nullptr || expert_offsets == nullptr || out == nullptr || routes < 1) {
    return cudaErrorInvalidValue;
  }
  const int threads = 256;
  const int blocks = (routes + threads - 1) / threads;
  SlotScalesKernel<<<blocks < 1024 ? blocks : 1024, threads, 0, stream>>>(scales, slot_token, slot_expert,
                                                                          expert_offsets, routes, out);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
