// fp16 / bf16 widening (widen16.h). Stateless; thread-safe.
#include "backend/cpu/widen16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/cpu_features.h"
#include "model/tensor.h"

namespace kvtier {
namespace {

using WidenFn = void (*)(const uint16_t*, int64_t, float*);

void WidenFp16Portable(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFloat(in[i]);
}

// bf16 is the top half of an fp32: shifting the bits up is the exact value.
void WidenBf16Portable(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void WidenFp16F16c(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  WidenFp16Portable(in + i, n - i, out + i);
}

__attribute__((target("avx2"))) void WidenBf16Avx2(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  WidenBf16Portable(in + i, n - i, out + i);
}
#endif

WidenFn SelectFp16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && CpuHasF16c()) return WidenFp16F16c;
#endif
  return WidenFp16Portable;
}

WidenFn SelectBf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return WidenBf16Avx2;
#endif
  return WidenBf16Portable;
}

}  // namespace

void WidenFp16(const uint16_t* in, int64_t n, float* out) {
  static const WidenFn fn = SelectFp16();
  fn(in, n, out);
}

void WidenBf16(const uint16_t* in, int64_t n, float* out) {
  static const WidenFn fn = SelectBf16();
  fn(in, n, out);
}

}  // namespace kvtier
