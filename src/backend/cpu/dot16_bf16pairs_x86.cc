// The kernel of dot16_bf16pairs.h, compiled for AVX-512 BF16 (target attributes) and called
// only where the processor has it (dot16.cc).
#include "backend/cpu/dot16_bf16pairs.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/weight_group_walk.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvtier {

#if defined(__x86_64__)
namespace {

constexpr int kGroupRows = 4;  // weight rows per micro-kernel call
constexpr int kTileRows = 6;   // activation rows per micro-kernel call
constexpr int kStep = 32;      // columns per instruction: 16 lanes of two

#define KVTIER_BF16 __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16")))

// Rows [0, rows) of x rounded to bf16 (round to nearest even), each padded with zeros to
// `padded` columns.
KVTIER_BF16 void RoundRows(const float* x, int64_t rows, int64_t cols, int64_t padded, uint16_t* out) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* src = x + t * cols;
    uint16_t* dst = out + t * padded;
    for (int64_t k = 0; k < padded; k += kStep) {
      const int64_t left = std::max<int64_t>(0, cols - k);
      const __mmask16 lo = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
      const __mmask16 hi = static_cast<__mmask16>(left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(lo, src + k);
      const __m512 b = _mm512_maskz_loadu_ps(hi, src + k + 16);
      _mm512_storeu_si512(dst + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
    }
  }
}

// x[0, count) rounded as RoundRows rounds, without padding: the tail's stores are masked.
KVTIER_BF16 void RoundValues(const float* x, int64_t count, uint16_t* out) {
  for (int64_t k = 0; k < count; k += kStep) {
    const int64_t left = count - k;
    const __mmask16 lo = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
    const __mmask16 hi = static_cast<__mmask16>(left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1);
    const __mmask32 both = left >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((uint64_t{1} << left) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(lo, x + k);
    const __m512 b = _mm512_maskz_loadu_ps(hi, x + k + 16);
    _mm512_mask_storeu_epi16(out + k, both, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
  }
}

// The sums of four registers' lanes, in lanes 0, 4, 8 and 12 of each 128-bit quarter order:
// quarter q holds register q's four partial sums after the first two steps.
KVTIER_BF16 inline __m512 FoldFour(const __m512* acc) {
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[0], acc[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(acc[0], acc[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2], acc[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(acc[2], acc[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // s01: quarters 0, 1 register 0's halves summed pairwise, 2, 3 register 1's; s23 likewise.
  return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Two rows' four outputs each (acc0, acc1: one register per output), folded: lanes 0-3 row
// 0's outputs, lanes 4-7 row 1's.
KVTIER_BF16 inline __m256 FoldRows(const __m512* acc0, const __m512* acc1) {
  const __m512 t = FoldFour(acc0);
  const __m512 u = FoldFour(acc1);
  // Quarter q: [t0 + t2, t1 + t3, u0 + u2, u1 + u3] of output q's partial sums.
  const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(t, u, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(t, u, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 w = _mm512_add_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, w));
}

KVTIER_BF16 inline void Store(__m128 values, const float* bias, int valid, float* out) {
  const __mmask8 mask = static_cast<__mmask8>((1u << valid) - 1);
  if (bias != nullptr) values = _mm_add_ps(values, _mm_maskz_loadu_ps(mask, bias));
  _mm_mask_storeu_ps(out, mask, values);
}

// R rounded activation rows (x, `padded` apart) against weight rows w[0..4); writes `valid`
// outputs of each row at out + r * out_stride, plus bias.
template <int R>
KVTIER_BF16 void Micro(const uint16_t* const* w, int64_t cols, const uint16_t* x, int64_t padded, const float* bias,
                       int valid, float* out, int64_t out_stride) {
  __m512 acc[R][kGroupRows];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 4
    for (int j = 0; j < kGroupRows; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  const int64_t full = cols / kStep * kStep;
  for (int64_t k = 0; k < full; k += kStep) {
    __m512bh wv[kGroupRows];
    #pragma GCC unroll 4
    for (int j = 0; j < kGroupRows; ++j) wv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w[j] + k));
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + r * padded + k));
      #pragma GCC unroll 4
      for (int j = 0; j < kGroupRows; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
    }
  }
  if (full < cols) {  // the weights' tail as zeros; the activations are padded with zeros
    const __mmask32 mask = static_cast<__mmask32>((1ull << (cols - full)) - 1);
    __m512bh wv[kGroupRows];
    #pragma GCC unroll 4
    for (int j = 0; j < kGroupRows; ++j) wv[j] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w[j] + full));
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + r * padded + full));
      #pragma GCC unroll 4
      for (int j = 0; j < kGroupRows; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
    }
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; r += 2) {
    const int second = r + 1 < R ? r + 1 : r;
    const __m256 folded = FoldRows(acc[r], acc[second]);
    Store(_mm256_castps256_ps128(folded), bias, valid, out + r * out_stride);
    if (r + 1 < R) Store(_mm256_extractf128_ps(folded, 1), bias, valid, out + (r + 1) * out_stride);
  }
}

using MicroFn = void (*)(const uint16_t* const* w, int64_t cols, const uint16_t* x, int64_t padded,
                         const float* bias, int valid, float* out, int64_t out_stride);
constexpr MicroFn kMicro[kTileRows] = {Micro<1>, Micro<2>, Micro<3>, Micro<4>, Micro<5>, Micro<6>};

#undef KVTIER_BF16

}  // namespace

void RoundToBf16Avx512(const float* x, int64_t count, uint16_t* out) { RoundValues(x, count, out); }

void Dot16Bf16PairsAvx512(const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x, int64_t rows,
                          const float* bias, float* out, int64_t out_stride) {
  thread_local std::vector<uint16_t> rounded;  // (rows, padded)
  const int64_t padded = (cols + kStep - 1) / kStep * kStep;
  rounded.resize(static_cast<size_t>(rows * padded));
  RoundRows(x, rows, cols, padded, rounded.data());
  const uint16_t* const* group = nullptr;  // the current group's rows (WalkWeightGroups)
  cpu_walk::WalkWeightGroups<kGroupRows, kTileRows>(
      w, cols, n0, n1, rows,
      cpu_walk::ActivationBlockRows<kTileRows>(padded * static_cast<int64_t>(sizeof(uint16_t))),
      [&](const uint16_t* const* rows_of_group, int64_t, int) { group = rows_of_group; },
      [&](int64_t t, int r, int64_t g, int valid) {
        kMicro[r - 1](group, cols, rounded.data() + t * padded, padded, bias != nullptr ? bias + g : nullptr, valid,
                      out + t * out_stride + g, out_stride);
      });
}

#else

void Dot16Bf16PairsAvx512(const uint16_t*, int64_t, int64_t, int64_t, const float*, int64_t, const float*, float*,
                          int64_t) {}
void RoundToBf16Avx512(const float*, int64_t, uint16_t*) {}

#endif

}  // namespace kvtier
