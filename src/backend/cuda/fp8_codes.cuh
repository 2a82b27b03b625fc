// E4M3 codes to floats and to 16-bit values on the device, by the hardware's e4m3x2 -> f16x2
// conversion: exact, since every E4M3 value is an f16 and a bf16 value. Shared by every
// kernel that reads fp8 weights or fp8 KV. And floats to codes by the hardware's f32x2 ->
// e4m3x2 conversion, which gives common/fp8_e4m3.h's codes (checked over every float by
// bench/micro/fp8_activation_rows.cu). Stateless device functions.
#ifndef KVTIER_BACKEND_CUDA_FP8_CODES_CUH_
#define KVTIER_BACKEND_CUDA_FP8_CODES_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/elem.cuh"
#include "common/fp8_e4m3.h"

namespace kvtier::cuda {

// Two codes (the low 16 bits of `pair`, the first in the low byte) as floats.
__device__ __forceinline__ float2 Fp8x2ToFloat2(uint32_t pair) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// Sixteen codes (16 bytes, the first in the low byte) as floats.
__device__ __forceinline__ void Fp8x16ToFloat(const uint4& v, float (&f)[16]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float2 t = Fp8x2ToFloat2(w[i] >> (16 * half));
      f[4 * i + 2 * half] = t.x;
      f[4 * i + 2 * half + 1] = t.y;
    }
  }
}

// Eight codes (8 bytes, the first in the low byte) as eight packed T, times `scale` when
// kScaled, else unscaled (exact).
template <typename T, bool kScaled>
__device__ __forceinline__ uint4 Fp8x8ToT(uint2 codes, float scale) {
  uint32_t out[4];
  const uint32_t words[2] = {codes.x, codes.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t pair = (words[i / 2] >> (16 * (i % 2))) & 0xffffu;
    if constexpr (std::is_same_v<T, f16> && !kScaled) {  // the conversion's own f16x2: one instruction
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
      out[i] = static_cast<uint32_t>(raw.x) | (static_cast<uint32_t>(raw.y) << 16);
    } else {
      const float2 f = Fp8x2ToFloat2(pair);
      out[i] = kScaled ? PackFloat2<T>(f.x * scale, f.y * scale) : PackFloat2<T>(f.x, f.y);
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Eight codes times `scale` as eight packed T.
template <typename T>
__device__ __forceinline__ uint4 DequantFp8x8(uint2 codes, float scale) {
  return Fp8x8ToT<T, true>(codes, scale);
}

// Eight codes as eight packed T, unscaled, for kernels that apply the row's scale after the
// product (decode_attention.cu).
template <typename T>
__device__ __forceinline__ uint4 Fp8CodesToT(uint2 codes) {
  return Fp8x8ToT<T, false>(codes, 1.0f);
}

// Two floats as E4M3 codes (the first in the low byte) by FloatToFp8E4M3's rule: round to
// nearest even, saturate at +-448 (infinities too), NaN to 0x7f or 0xff by its sign. On sm_89+
// one saturating cvt, where the software rule is a few dozen instructions and branches; the
// hardware writes 0x7f for every NaN, so a NaN's sign is put back.
__device__ __forceinline__ uint32_t Float2ToFp8x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t pair = __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
  if (isnan(lo)) pair = (pair & 0xff00u) | (signbit(lo) ? 0xffu : 0x7fu);
  if (isnan(hi)) pair = (pair & 0x00ffu) | ((signbit(hi) ? 0xffu : 0x7fu) << 8);
  return pair;
#else
  return FloatToFp8E4M3(lo) | (static_cast<uint32_t>(FloatToFp8E4M3(hi)) << 8);
#endif
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FP8_CODES_CUH_
