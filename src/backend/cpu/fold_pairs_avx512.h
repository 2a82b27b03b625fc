// The fold of fold_lanes.h for eight outputs at once, in AVX-512 registers, for kernels
// that hold two outputs' eight lanes in one 16-lane register (the low half output 2p, the
// high half output 2p + 1). Each vector add is the same fp32 add the scalar fold makes on
// the same two lanes (l += l + 4, l += l + 2, l += l + 1), so the bits are the fold's; the
// shuffles only move lanes. A scalar fold costs a store and 14 adds per register, which
// with short rows (a 256-column matrix takes 32 steps) is a large part of a kernel call.
// Internal linkage, compiled for AVX-512; include only from files built with
// -ffp-contract=off and call only where the processor has AVX-512 F.
#ifndef KVTIER_BACKEND_CPU_FOLD_PAIRS_AVX512_H_
#define KVTIER_BACKEND_CPU_FOLD_PAIRS_AVX512_H_

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace kvtier::cpu_lanes {

#define KVTIER_FOLD_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl"), always_inline))

// acc[p], p < 4: outputs 2p and 2p + 1 of one row. Returns per 128-bit quarter i the
// row's outputs i and 4 + i after two of the three fold steps, two lanes each.
KVTIER_FOLD_AVX512 static inline __m512 FoldTwoSteps(const __m512* acc) {
  // Step 1: quarters 0,1 of a register are output 2p's lanes 0-3 and 4-7, quarters 2,3 output 2p + 1's.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[0], acc[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(acc[0], acc[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2], acc[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(acc[2], acc[3], _MM_SHUFFLE(3, 1, 3, 1)));
  // Quarter i of s01 is output i's four lanes, of s23 output 4 + i's. Step 2: l += l + 2.
  return _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Two rows' eight outputs each (acc0, acc1: four pair registers per row, as above), folded:
// lanes 0-7 row 0's outputs 0..7, lanes 8-15 row 1's.
KVTIER_FOLD_AVX512 static inline __m512 FoldPairRows(const __m512* acc0, const __m512* acc1) {
  const __m512 t = FoldTwoSteps(acc0);
  const __m512 u = FoldTwoSteps(acc1);
  // Step 3: l += l + 1. Quarter i then holds row 0's outputs i, 4 + i and row 1's.
  const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(t, u, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(t, u, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, v);
}

// Writes `valid` (<= 8) folded outputs of a row, plus bias when there is one.
KVTIER_FOLD_AVX512 static inline void StoreOutputs(__m256 values, const float* bias, int valid, float* out) {
  const __mmask8 mask = static_cast<__mmask8>((1u << valid) - 1);
  if (bias != nullptr) values = _mm256_add_ps(values, _mm256_maskz_loadu_ps(mask, bias));
  _mm256_mask_storeu_ps(out, mask, values);
}

// Rows 0..R-1 of a micro-kernel's accumulators (four pair registers a row, as above), folded
// two rows at a time and stored `out_stride` apart, plus bias when there is one; a lone last
// row folds with itself and is stored once.
template <int R>
KVTIER_FOLD_AVX512 static inline void StoreRows(const __m512 (&acc)[R][4], const float* bias, int valid, float* out,
                                                int64_t out_stride) {
#pragma GCC unroll 4
  for (int r = 0; r < R; r += 2) {
    const int second = r + 1 < R ? r + 1 : r;
    const __m512 folded = FoldPairRows(acc[r], acc[second]);
    StoreOutputs(_mm512_castps512_ps256(folded), bias, valid, out + r * out_stride);
    if (r + 1 < R) StoreOutputs(_mm512_extractf32x8_ps(folded, 1), bias, valid, out + (r + 1) * out_stride);
  }
}

#undef KVTIER_FOLD_AVX512

}  // namespace kvtier::cpu_lanes

#endif  // defined(__x86_64__)

#endif  // KVTIER_BACKEND_CPU_FOLD_PAIRS_AVX512_H_
