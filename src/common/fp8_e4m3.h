// FP8 E4M3 ("e4m3fn": 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no infinities,
// one NaN pattern per sign S.1111.111) <-> float, one definition for host and device code so
// the CUDA kernels and the CPU reference produce the same bytes. Pure functions; thread-safe.
//
// Narrowing rounds to nearest, ties to even, and saturates: finite values and infinities
// beyond the largest finite code (448) become +-448 (what CUDA's __NV_SATFINITE cast does);
// NaN stays NaN. Saturating instead of producing NaN (torch's plain cast) matters because a
// scale computed as amax / 448 can leave x / scale a rounding error above 448.
#ifndef KVTIER_COMMON_FP8_E4M3_H_
#define KVTIER_COMMON_FP8_E4M3_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVTIER_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVTIER_HOST_DEVICE inline
#endif

namespace kvtier {

inline constexpr float kFp8E4M3Max = 448.0f;

namespace fp8_detail {

KVTIER_HOST_DEVICE uint32_t FloatBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

KVTIER_HOST_DEVICE float BitsFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

}  // namespace fp8_detail

// Exact: every E4M3 value is a float.
KVTIER_HOST_DEVICE float Fp8E4M3ToFloat(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u) return fp8_detail::BitsFloat(sign | 0x7fc00000u);
  if (exponent == 0) {
    // Subnormal: mantissa * 2^-9, built as (1.mantissa... ) via float arithmetic that is exact.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
    return fp8_detail::BitsFloat(sign | fp8_detail::FloatBits(magnitude));
  }
  // Rebias 7 -> 127 and widen the mantissa 3 -> 23 bits.
  return fp8_detail::BitsFloat(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

KVTIER_HOST_DEVICE uint8_t FloatToFp8E4M3(float value) {
  uint32_t x = fp8_detail::FloatBits(value);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (x >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  if (x >= 0x3c800000u) {  // normal E4M3 (>= 2^-6)
    const uint32_t mantissa = x & 0x7fffffu;
    uint32_t h = ((((x >> 23) - 127u + 7u)) << 3) | (mantissa >> 20);
    const uint32_t rest = mantissa & 0xfffffu;
    // The carry may bump the exponent; below 448 it never reaches the NaN pattern 0x7f.
    if (rest > 0x80000u || (rest == 0x80000u && (h & 1u))) ++h;
    return static_cast<uint8_t>(sign | h);
  }
  // Subnormal E4M3: value / 2^-9 rounded to nearest even (may carry into the smallest normal).
  const int exponent = static_cast<int>(x >> 23) - 127;
  const int shift = 14 - exponent;  // >= 21 here
  if (shift > 24) return sign;      // below half the smallest subnormal (and float subnormals)
  const uint32_t significand = (x & 0x7fffffu) | 0x800000u;
  uint32_t h = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<uint8_t>(sign | h);
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_FP8_E4M3_H_
