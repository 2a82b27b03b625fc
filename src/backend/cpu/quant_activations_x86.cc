// The AVX-512 Q8_0 activation quantizer of quant_activations.h: the portable code's bytes,
// 32 values a block in two registers. The largest magnitude is order-free (max of values
// that are not NaN, as std::max skips them), the scale and its inverse are the portable
// scalar code, and rounding is the same half-to-even of the same products. A block whose
// inverse scale is not finite (all values tiny, or an infinite one) takes the portable code.
// Built with -ffp-contract=off; thread-safe.
#include <cmath>
#include <cstdint>

#include "backend/cpu/quant_activations.h"
#include "common/cpu_features.h"
#include "model/tensor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvtier {

#if defined(__x86_64__)

__attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl"))) void QuantizeActivationsQ8_0Avx512(
    const float* x, int64_t n, uint8_t* out, float* scales) {
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < n / kQ8_0Values; ++i, x += kQ8_0Values, out += kQ8_0Bytes) {
    const __m512 v0 = _mm512_loadu_ps(x);
    const __m512 v1 = _mm512_loadu_ps(x + 16);
    // max_ps(a, b) gives b where either is NaN: a NaN value never replaces the running maximum.
    __m512 m = _mm512_max_ps(_mm512_and_ps(v0, magnitude), _mm512_setzero_ps());
    m = _mm512_max_ps(_mm512_and_ps(v1, magnitude), m);
    const float amax = _mm512_reduce_max_ps(m);
    const uint16_t d = FloatToFp16(amax / 127.0f);
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (!std::isfinite(inverse) || !std::isfinite(amax)) {
      QuantizeActivationsQ8_0Portable(x, kQ8_0Values, out);
    } else {
      out[0] = static_cast<uint8_t>(d & 0xFF);
      out[1] = static_cast<uint8_t>(d >> 8);
      const __m512 inv = _mm512_set1_ps(inverse);
      constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, inv), kNearest));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, inv), kNearest));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 18), _mm512_cvtepi32_epi8(q1));
    }
    if (scales != nullptr) scales[i] = _cvtsh_ss(static_cast<uint16_t>(out[0] | (out[1] << 8)));
  }
}

bool HasQuantizeActivationsQ8_0Avx512() {
  static const bool has = CpuHasAvx512();
  return has;
}

#else

void QuantizeActivationsQ8_0Avx512(const float*, int64_t, uint8_t*, float*) {}
bool HasQuantizeActivationsQ8_0Avx512() { return false; }

#endif

}  // namespace kvtier
