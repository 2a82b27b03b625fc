// The AVX2 and AVX-512 VNNI kernels of quant_dot.h, for the Q8_0 and K-quant weights where
// the speed matters (the VNNI set takes the AVX2 K-quant kernels); Q4_0 runs the
// portable kernel in every set. Each function is compiled for its own instruction set
// (target attributes) and called only where the processor has it (quant_dot.cc). This file
// is built with -ffp-contract=off: the float operations must stay the portable code's, fused
// only where it fuses them (std::fmaf, _mm256_fmadd_ps).
#include "backend/cpu/quant_dot.h"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/quant_dot_internal.h"
#include "model/block_quants.h"

namespace kvtier {

#if defined(__x86_64__)
namespace {

using quant_dot_internal::AccumulateQ4_K;
using quant_dot_internal::Bits16;
using quant_dot_internal::FoldLanes;
using quant_dot_internal::kLanes;
using quant_dot_internal::KQuantPairMins;
using quant_dot_internal::Q8K;

#define KVTIER_AVX2 __attribute__((target("avx2,f16c,fma")))
#define KVTIER_VNNI __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

KVTIER_AVX2 inline float Half(const uint8_t* p) { return _cvtsh_ss(Bits16(p)); }

// Eight lanes of four products each of the signed bytes w and a.
KVTIER_AVX2 inline __m256i LanesAvx2(__m256i w, __m256i a) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

KVTIER_VNNI inline __m256i LanesVnni(__m256i w, __m256i a) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

KVTIER_AVX2 inline float FoldAcc(__m256 acc) {
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc);
  return FoldLanes(lanes);
}

KVTIER_AVX2 float DotQ8_0Avx2(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b, w += 34, a += kQ8_0Bytes) {
    const __m256i lanes = LanesAvx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2)),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2)));
    const __m256 d = _mm256_set1_ps(Half(w) * Half(a));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(lanes), d));
  }
  return FoldAcc(acc);
}

KVTIER_VNNI float DotQ8_0Vnni(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b, w += 34, a += kQ8_0Bytes) {
    const __m256i lanes = LanesVnni(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2)),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2)));
    const __m256 d = _mm256_set1_ps(Half(w) * Half(a));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(lanes), d));
  }
  return FoldAcc(acc);
}

// Four activation rows per weight row: each weight block is loaded once for the four.
#define KVTIER_DOT_Q8_0_X4(LANES)                                                                         \
  __m256 acc[4];                                                                                         \
  for (__m256& a_r : acc) a_r = _mm256_setzero_ps();                                                     \
  for (int64_t b = 0; b < num_blocks; ++b, w += 34, a += kQ8_0Bytes) {                                  \
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));                      \
    const __m256 d_w = _mm256_set1_ps(Half(w));                                                          \
    for (int r = 0; r < 4; ++r) {                                                                        \
      const __m256i lanes =                                                                              \
          LANES(wq, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * stride + 2)));           \
      const __m256 d = _mm256_mul_ps(d_w, _mm256_broadcast_ss(scales + r * scale_stride + b));           \
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(lanes), d));                       \
    }                                                                                                    \
  }                                                                                                      \
  for (int r = 0; r < 4; ++r) out[r] = FoldAcc(acc[r]);

KVTIER_AVX2 void DotQ8_0x4Avx2(const uint8_t* w, const uint8_t* a, size_t stride, const float* scales,
                               size_t scale_stride, int64_t num_blocks, float* out) {
  KVTIER_DOT_Q8_0_X4(LanesAvx2)
}

KVTIER_VNNI void DotQ8_0x4Vnni(const uint8_t* w, const uint8_t* a, size_t stride, const float* scales,
                               size_t scale_stride, int64_t num_blocks, float* out) {
  KVTIER_DOT_Q8_0_X4(LanesVnni)
}

#undef KVTIER_DOT_Q8_0_X4

// The four int32 sums of the eight lanes of t[0..3], in that order.
KVTIER_AVX2 inline __m128i SumLanes4(const __m256i* t) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(t[0], t[1]), _mm256_hadd_epi32(t[2], t[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// scale x (four products of unsigned v and signed a) in eight lanes.
KVTIER_AVX2 inline __m256i ScaledAvx2(__m256i v, __m256i a, int scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(v, a), _mm256_set1_epi16(static_cast<int16_t>(scale)));
}

// Q4_K: chunk c of 32 bytes holds sub-block 2c in its low nibbles, 2c + 1 in its high ones
// (pair c). The nibbles are unsigned, so they take the unsigned side of the byte products
// directly. (VNNI's dpbusd gives the same lanes but then needs a 32-bit multiply by the
// scale: it measured no faster, so this kernel serves both sets.)
KVTIER_AVX2 float DotQ4_KAvx2(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t b = 0; b < num_blocks; ++b, w += 144, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const uint8_t* scales = w + 4;
    __m256i pairs[4];
    for (int c = 0; c < 4; ++c) {
      int s1, m1, s2, m2;
      KQuantScaleMin(scales, 2 * c, &s1, &m1);
      KQuantScaleMin(scales, 2 * c + 1, &s2, &m2);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * c));
      const __m256i a_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c));
      const __m256i a_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c + 32));
      pairs[c] = _mm256_add_epi32(ScaledAvx2(_mm256_and_si256(q, nibble), a_low, s1),
                                  ScaledAvx2(_mm256_and_si256(_mm256_srli_epi16(q, 4), nibble), a_high, s2));
    }
    alignas(16) int32_t totals[4];
    int32_t mins[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(totals), SumLanes4(pairs));
    KQuantPairMins(scales, y, mins);
    AccumulateQ4_K(Half(w), Half(w + 2), y.d, totals, mins, &acc, &acc_min);
  }
  return acc - acc_min;
}

// Q5_K: as Q4_K, each value's fifth bit from qh (bit j of byte l for value l of sub-block
// j), summed in ggml's eight lanes (quant_dot.h) with the min term apart.
KVTIER_AVX2 float DotQ5_KAvx2(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), bit = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins_sum = 0.0f;
  for (int64_t b = 0; b < num_blocks; ++b, w += 176, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const uint8_t* scales = w + 4;
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
    __m256i lanes = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      int s1, m1, s2, m2;
      KQuantScaleMin(scales, 2 * c, &s1, &m1);
      KQuantScaleMin(scales, 2 * c + 1, &s2, &m2);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 48 + 32 * c));
      const __m256i high1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), bit), 4);
      const __m256i high2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), bit), 4);
      const __m256i v1 = _mm256_or_si256(_mm256_and_si256(q, nibble), high1);
      const __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), nibble), high2);
      const __m256i a_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c));
      const __m256i a_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c + 32));
      lanes = _mm256_add_epi32(lanes, _mm256_add_epi32(ScaledAvx2(v1, a_low, s1), ScaledAvx2(v2, a_high, s2)));
    }
    int32_t mins[4];
    KQuantPairMins(scales, y, mins);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y.d * Half(w)), _mm256_cvtepi32_ps(lanes), acc);
    const float dmin = -(y.d * Half(w + 2));
    mins_sum = std::fmaf(dmin, static_cast<float>(mins[0] + mins[1] + mins[2] + mins[3]), mins_sum);
  }
  return FoldAcc(acc) + mins_sum;
}

// Q6_K: chunk k of each half n holds 32 values, four bits from ql (low or high nibbles of
// one of two 32-byte rows) and two from qh (bits 2k, 2k + 1); its first 16 values take
// scale 8n + 2k, the next 16 scale 8n + 2k + 1. The -32 offset comes off each lane through
// the block sums, as ggml takes it.
KVTIER_AVX2 float DotQ6_KAvx2(const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), two_bits = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b, w += 210, a += sizeof(BlockQ8K)) {
    const BlockQ8K& y = *Q8K(a);
    const int8_t* scales = reinterpret_cast<const int8_t*>(w + 192);
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    __m256i lanes = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5));
    for (int n = 0; n < 2; ++n) {
      const __m256i ql[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * n)),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * n + 32))};
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * n));
      for (int k = 0; k < 4; ++k) {
        const __m256i low = k < 2 ? _mm256_and_si256(ql[k & 1], nibble)
                                  : _mm256_and_si256(_mm256_srli_epi16(ql[k & 1], 4), nibble);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), two_bits);
        const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
        const __m256i act = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 128 * n + 32 * k));
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(scales[8 * n + 2 * k + 1]),
                                               _mm_set1_epi16(scales[8 * n + 2 * k]));
        lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(q, act), scale));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y.d * Half(w + 208)), _mm256_cvtepi32_ps(lanes), acc);
  }
  return FoldAcc(acc);
}

}  // namespace

const QuantDotKernels* Avx2QuantDot() {
  static const QuantDotKernels kernels{"avx2", DotQ8_0Avx2, PortableQuantDot().q4_0, DotQ4_KAvx2,
                                       DotQ5_KAvx2, DotQ6_KAvx2, DotQ8_0x4Avx2};
  return &kernels;
}

const QuantDotKernels* Avx512VnniQuantDot() {
  static const QuantDotKernels kernels{"avx512vnni", DotQ8_0Vnni, PortableQuantDot().q4_0, DotQ4_KAvx2,
                                       DotQ5_KAvx2, DotQ6_KAvx2, DotQ8_0x4Vnni};
  return &kernels;
}

#else

const QuantDotKernels* Avx2QuantDot() { return nullptr; }
const QuantDotKernels* Avx512VnniQuantDot() { return nullptr; }

#endif

}  // namespace kvtier
