// The AVX2 and AVX-512 kernels of dot16.h. The blocking (dot16.h) is one driver; each
// instruction set brings a micro-kernel: eight weight rows against one to four activation
// rows over all columns, compiled for its own instruction set (target attributes) and
// called only where the processor has it (dot16.cc). This file is built with
// -ffp-contract=off: the multiplies and adds must stay separate, as the reference's are.
#include "backend/cpu/dot16.h"

#include <algorithm>

#include "backend/cpu/dot16_bf16pairs.h"
#include "backend/cpu/dot16_panel.h"
#include "backend/cpu/fold_lanes.h"
#include "backend/cpu/weight_group_walk.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvtier {

#if defined(__x86_64__)
namespace {

using cpu_lanes::FoldLanes;
using cpu_lanes::kLanes;
constexpr int kGroupRows = 8;    // weight rows per micro-kernel call
constexpr int kMaxRows = 4;      // activation rows per micro-kernel call

// w: kGroupRows row pointers; x: the activation rows, `cols` apart; out[r * kGroupRows + j]:
// activation row r against weight row j, without bias.
using MicroFn = void (*)(const uint16_t* const* w, const float* x, int64_t cols, float* out);

// micro[r - 1] takes r activation rows.
void Drive(const MicroFn* micro, const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x,
           int64_t rows, const float* bias, float* out, int64_t out_stride) {
  const uint16_t* const* group = nullptr;  // the current group's rows (WalkWeightGroups)
  cpu_walk::WalkWeightGroups<kGroupRows, kMaxRows>(
      w, cols, n0, n1, rows,
      cpu_walk::ActivationBlockRows<kMaxRows>(cols * static_cast<int64_t>(sizeof(float))),
      [&](const uint16_t* const* rows_of_group, int64_t, int) { group = rows_of_group; },
      [&](int64_t t, int r, int64_t g, int valid) {
        float values[kMaxRows * kGroupRows];
        micro[r - 1](group, x + t * cols, cols, values);
        for (int i = 0; i < r; ++i) {
          float* o = out + (t + i) * out_stride + g;
          for (int j = 0; j < valid; ++j) {
            o[j] = bias != nullptr ? values[i * kGroupRows + j] + bias[g + j] : values[i * kGroupRows + j];
          }
        }
      });
}

#define KVTIER_AVX2 __attribute__((target("avx2,f16c")))
#define KVTIER_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")))

// The loops over rows and pairs are unrolled early (#pragma GCC unroll), so that GCC keeps
// the accumulator arrays in registers instead of storing them at every column step.

// ---- AVX2: one 8-lane register per output, two weight rows at a time.

template <bool kBf16>
KVTIER_AVX2 inline __m256 Widen8(__m128i h) {
  if constexpr (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

template <bool kBf16>
KVTIER_AVX2 inline __m256 Load8(const uint16_t* p) {
  return Widen8<kBf16>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int R, bool kBf16>
KVTIER_AVX2 void MicroAvx2(const uint16_t* const* w, const float* x, int64_t cols, float* out) {
  const int64_t full = cols / kLanes * kLanes;
  const int tail = static_cast<int>(cols - full);
  const __m256i lane_index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 tail_mask = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(tail), lane_index));
  for (int q = 0; q < kGroupRows; q += 2) {
    __m256 acc[R][2];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < full; k += kLanes) {
      const __m256 w0 = Load8<kBf16>(w[q] + k);
      const __m256 w1 = Load8<kBf16>(w[q + 1] + k);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_loadu_ps(x + r * cols + k);
        acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(xv, w0));
        acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(xv, w1));
      }
    }
    if (tail > 0) {  // lanes past the tail keep their sums: no zero is added to them
      alignas(16) uint16_t h0[kLanes] = {}, h1[kLanes] = {};
      std::copy(w[q] + full, w[q] + cols, h0);
      std::copy(w[q + 1] + full, w[q + 1] + cols, h1);
      const __m256 w0 = Load8<kBf16>(h0);
      const __m256 w1 = Load8<kBf16>(h1);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        alignas(32) float xt[kLanes] = {};
        std::copy(x + r * cols + full, x + r * cols + cols, xt);
        const __m256 xv = _mm256_load_ps(xt);
        acc[r][0] = _mm256_blendv_ps(acc[r][0], _mm256_add_ps(acc[r][0], _mm256_mul_ps(xv, w0)), tail_mask);
        acc[r][1] = _mm256_blendv_ps(acc[r][1], _mm256_add_ps(acc[r][1], _mm256_mul_ps(xv, w1)), tail_mask);
      }
    }
    alignas(32) float lanes[kLanes];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      #pragma GCC unroll 8
      for (int j = 0; j < 2; ++j) {
        _mm256_store_ps(lanes, acc[r][j]);
        out[r * kGroupRows + q + j] = FoldLanes(lanes);
      }
    }
  }
}

// ---- AVX-512: weight rows in pairs, row 2p's eight lanes in the low half of a register and
// row 2p + 1's in the high half; each activation row's eight columns broadcast to both.

template <bool kBf16>
KVTIER_AVX512 inline __m512 Widen16(__m256i h) {
  if constexpr (kBf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

template <bool kBf16>
KVTIER_AVX512 inline __m512 LoadPair(const uint16_t* a, const uint16_t* b, __mmask8 mask) {
  const __m128i lo = _mm_maskz_loadu_epi16(mask, a);
  const __m128i hi = _mm_maskz_loadu_epi16(mask, b);
  return Widen16<kBf16>(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

template <int R, bool kBf16>
KVTIER_AVX512 void MicroAvx512(const uint16_t* const* w, const float* x, int64_t cols, float* out) {
  constexpr int kPairs = kGroupRows / 2;
  __m512 acc[R][kPairs];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 8
    for (int p = 0; p < kPairs; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  const int64_t full = cols / kLanes * kLanes;
  for (int64_t k = 0; k < full; k += kLanes) {
    __m512 wp[kPairs];
    #pragma GCC unroll 8
    for (int p = 0; p < kPairs; ++p) wp[p] = LoadPair<kBf16>(w[2 * p] + k, w[2 * p + 1] + k, 0xFF);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + r * cols + k));
      #pragma GCC unroll 8
      for (int p = 0; p < kPairs; ++p) acc[r][p] = _mm512_add_ps(acc[r][p], _mm512_mul_ps(xv, wp[p]));
    }
  }
  if (full < cols) {  // lanes past the tail keep their sums: no zero is added to them
    const __mmask8 m8 = static_cast<__mmask8>((1u << (cols - full)) - 1);
    const __mmask16 m16 = static_cast<__mmask16>(m8 | (m8 << 8));
    __m512 wp[kPairs];
    #pragma GCC unroll 8
    for (int p = 0; p < kPairs; ++p) wp[p] = LoadPair<kBf16>(w[2 * p] + full, w[2 * p + 1] + full, m8);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m8, x + r * cols + full));
      #pragma GCC unroll 8
      for (int p = 0; p < kPairs; ++p) {
        acc[r][p] = _mm512_mask_add_ps(acc[r][p], m16, acc[r][p], _mm512_mul_ps(xv, wp[p]));
      }
    }
  }
  alignas(64) float lanes[2 * kLanes];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 8
    for (int p = 0; p < kPairs; ++p) {
      _mm512_store_ps(lanes, acc[r][p]);
      out[r * kGroupRows + 2 * p] = FoldLanes(lanes);
      out[r * kGroupRows + 2 * p + 1] = FoldLanes(lanes + kLanes);
    }
  }
}

#undef KVTIER_AVX2
#undef KVTIER_AVX512

template <template <int, bool> class Micro, bool kBf16>
void Kernel(const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x, int64_t rows,
            const float* bias, float* out, int64_t out_stride) {
  static constexpr MicroFn kMicro[kMaxRows] = {Micro<1, kBf16>::Run, Micro<2, kBf16>::Run, Micro<3, kBf16>::Run,
                                               Micro<4, kBf16>::Run};
  Drive(kMicro, w, cols, n0, n1, x, rows, bias, out, out_stride);
}

template <int R, bool kBf16>
struct Avx2Micro {
  static constexpr MicroFn Run = MicroAvx2<R, kBf16>;
};

template <int R, bool kBf16>
struct Avx512Micro {
  static constexpr MicroFn Run = MicroAvx512<R, kBf16>;
};

// Many activation rows (prefill) take the panel kernel (dot16_panel.h), which gives the same bits.
template <bool kBf16>
void KernelAvx512(const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x, int64_t rows,
                  const float* bias, float* out, int64_t out_stride) {
  if (rows >= kDot16PanelMinRows) {
    Dot16PanelAvx512(kBf16, w, cols, n0, n1, x, rows, bias, out, out_stride);
    return;
  }
  Kernel<Avx512Micro, kBf16>(w, cols, n0, n1, x, rows, bias, out, out_stride);
}

}  // namespace

const Dot16Kernels* Avx2Dot16() {
  static const Dot16Kernels kernels{"avx2", Kernel<Avx2Micro, false>, Kernel<Avx2Micro, true>};
  return &kernels;
}

const Dot16Kernels* Avx512Dot16() {
  static const Dot16Kernels kernels{"avx512", KernelAvx512<false>, KernelAvx512<true>};
  return &kernels;
}

const Dot16Kernels* Avx512Bf16Dot16() {
  static const Dot16Kernels kernels{"avx512bf16", KernelAvx512<false>, Dot16Bf16PairsAvx512, false};
  return &kernels;
}

#else

const Dot16Kernels* Avx2Dot16() { return nullptr; }
const Dot16Kernels* Avx512Dot16() { return nullptr; }
const Dot16Kernels* Avx512Bf16Dot16() { return nullptr; }

#endif

}  // namespace kvtier
