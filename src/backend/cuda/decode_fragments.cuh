// Register-fragment helpers of the decode attention kernel (decode_attention.cu): its tensor-core
// product, the 32-bit words and 16-bit pairs of the register arrays its 16-byte loads fill,
// and a probability pair packed with the rounded values it adds up. Stateless device functions.
#ifndef KVTIER_BACKEND_CUDA_DECODE_FRAGMENTS_CUH_
#define KVTIER_BACKEND_CUDA_DECODE_FRAGMENTS_CUH_

#include <cstdint>

#include "backend/cuda/elem.cuh"

namespace kvtier::cuda::decode {

template <typename T>
__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  MmaM16N8K16<T>(c, {a0, a1, a2, a3}, {b0, b1});
}

// 32-bit word w of a register array of 16-byte pieces (w a compile-time constant after
// unrolling, so the array stays in registers).
template <int N>
__device__ __forceinline__ uint32_t Word(const uint4 (&a)[N], int w) {
  const uint4 v = a[w / 4];
  switch (w % 4) {
    case 0: return v.x;
    case 1: return v.y;
    case 2: return v.z;
    default: return v.w;
  }
}

// 16-bit pair (element e of x, element e of y) -- x, y hold 8 elements per 16-byte piece.
template <int N>
__device__ __forceinline__ uint32_t PairOf(const uint4 (&x)[N], const uint4 (&y)[N], int e) {
  return __byte_perm(Word(x, e / 2), Word(y, e / 2), (e & 1) ? 0x7632 : 0x5410);
}

// The pair packed as T; adds the rounded values (what the mma multiplies) to *rounded_sum.
template <typename T>
__device__ __forceinline__ uint32_t PackRounded(float lo, float hi, float* rounded_sum) {
  const uint32_t bits = PackFloat2<T>(lo, hi);
  const float2 r = UnpackFloat2<T>(bits);
  *rounded_sum += r.x + r.y;
  return bits;
}

}  // namespace kvtier::cuda::decode

#endif  // KVTIER_BACKEND_CUDA_DECODE_FRAGMENTS_CUH_
