// Device-side conversions of the 16-bit element types the kernels are instantiated for
// (bf16 and fp16, kernels.h): one overload set, so a kernel templated on T reads and writes
// either without branching. fp32 arithmetic everywhere; only loads and stores are 16-bit.
#ifndef KVTIER_BACKEND_CUDA_ELEM_CUH_
#define KVTIER_BACKEND_CUDA_ELEM_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

__device__ __forceinline__ float ToFloat(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(f16 v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ bf16 FromFloat<bf16>(float v) { return __float2bfloat16(v); }
template <>
__device__ __forceinline__ f16 FromFloat<f16>(float v) { return __float2half_rn(v); }

// Two packed elements (the low one first in memory) as 32 bits, and back.
template <typename T>
__device__ __forceinline__ uint32_t PackFloat2(float lo, float hi) {
  if constexpr (std::is_same_v<T, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <typename T>
__device__ __forceinline__ float2 UnpackFloat2(uint32_t bits) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
}

// The eight elements of a 16-byte vector as floats.
template <typename T>
__device__ __forceinline__ void Unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = UnpackFloat2<T>(w[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

template <typename T>
__device__ __forceinline__ uint4 Pack8(const float (&f)[8]) {
  return make_uint4(PackFloat2<T>(f[0], f[1]), PackFloat2<T>(f[2], f[3]),
                    PackFloat2<T>(f[4], f[5]), PackFloat2<T>(f[6], f[7]));
}

// d += a * b on the tensor cores: m16n8k16, row-major a, column-major b, fp32 accumulate,
// inputs of type T (the fragment layout is the same for bf16 and fp16).
template <typename T>
__device__ __forceinline__ void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4],
                                            const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

}  // namespace kvtier::cuda

// Explicit instantiations of a launcher template for both element types.
#define KVTIER_CUDA_INSTANTIATE_ELEM(MACRO) \
  MACRO(::kvtier::cuda::bf16)               \
  MACRO(::kvtier::cuda::f16)

#endif  // KVTIER_BACKEND_CUDA_ELEM_CUH_
