// ApplyTokenMasks: grammar masks on the device (kernels.h). One grid row per logits row;
// rows without a mask return at once. Runs right after the lm_head GEMM, before argmax or
// sampling, so every later step sees the masked logits (-inf where not allowed).
#include <cmath>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    ApplyTokenMasksKernel(float* logits, int vocab, const int32_t* slots, const uint32_t* masks, int words) {
  const int row = blockIdx.y;
  const int slot = slots[row];
  if (slot < 0) return;
  const uint32_t* mask = masks + static_cast<int64_t>(slot) * words;
  float* out = logits + static_cast<int64_t>(row) * vocab;
  for (int t = blockIdx.x * kThreads + threadIdx.x; t < vocab; t += gridDim.x * kThreads) {
    if (((mask[t >> 5] >> (t & 31)) & 1u) == 0) out[t] = -INFINITY;
  }
}

}  // namespace

cudaError_t ApplyTokenMasks(float* logits, int rows, int vocab, const int32_t* slots, const uint32_t* masks,
                            int words, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (vocab <= 0 || logits == nullptr || slots == nullptr || masks == nullptr) return cudaErrorInvalidValue;
  const int blocks_per_row = std::min((vocab + kThreads - 1) / kThreads, 64);
  ApplyTokenMasksKernel<<<dim3(blocks_per_row, rows), kThreads, 0, stream>>>(logits, vocab, slots, masks, words);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
