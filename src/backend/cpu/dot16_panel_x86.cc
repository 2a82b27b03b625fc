// The panel kernel of dot16_panel.h. Built with -ffp-contract=off: the multiplies and adds
// must stay separate, as the reference's are.
#include "backend/cpu/dot16_panel.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/fold_lanes.h"
#include "backend/cpu/fold_pairs_avx512.h"
#include "backend/cpu/weight_group_walk.h"

namespace kvtier {

#if defined(__x86_64__)
namespace {

using cpu_lanes::kLanes;
constexpr int kGroupRows = 8;          // weight rows per panel
constexpr int kPairs = kGroupRows / 2;  // registers per activation row: two weight rows each
constexpr int kTileRows = 6;           // activation rows per micro-kernel call
constexpr int kPairFloats = 2 * kLanes;

#define KVTIER_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")))

template <bool kBf16>
KVTIER_AVX512 inline __m512 LoadPair(const uint16_t* a, const uint16_t* b, __mmask8 mask) {
  const __m128i lo = _mm_maskz_loadu_epi16(mask, a);
  const __m128i hi = _mm_maskz_loadu_epi16(mask, b);
  const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  if constexpr (kBf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

// The panel of weight rows w[0..8): for column step s (eight columns) and pair p, sixteen
// floats at panel + (s * kPairs + p) * kPairFloats, row 2p's eight columns then row 2p + 1's;
// a short last step is padded with zeros.
template <bool kBf16>
KVTIER_AVX512 void Widen(const uint16_t* const* w, int64_t cols, float* panel) {
  for (int64_t k = 0, s = 0; k < cols; k += kLanes, ++s) {
    const __mmask8 mask = static_cast<__mmask8>(cols - k >= kLanes ? 0xFF : (1u << (cols - k)) - 1);
    #pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) {
      _mm512_storeu_ps(panel + (s * kPairs + p) * kPairFloats, LoadPair<kBf16>(w[2 * p] + k, w[2 * p + 1] + k, mask));
    }
  }
}

// R activation rows (x, `cols` apart) against one panel; writes `valid` outputs of each row
// at out + r * out_stride, plus bias.
template <int R>
KVTIER_AVX512 void Micro(const float* panel, const float* x, int64_t cols, const float* bias, int valid, float* out,
                         int64_t out_stride) {
  __m512 acc[R][kPairs];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  const int64_t full = cols / kLanes;
  const float* wp = panel;
  for (int64_t s = 0; s < full; ++s, wp += kPairs * kPairFloats) {
    __m512 w[kPairs];
    #pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) w[p] = _mm512_loadu_ps(wp + p * kPairFloats);
    const float* xs = x + s * kLanes;
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(xs + r * cols));
      #pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) acc[r][p] = _mm512_add_ps(acc[r][p], _mm512_mul_ps(xv, w[p]));
    }
  }
  if (full * kLanes < cols) {  // lanes past the tail keep their sums: no zero is added to them
    const __mmask8 m8 = static_cast<__mmask8>((1u << (cols - full * kLanes)) - 1);
    const __mmask16 m16 = static_cast<__mmask16>(m8 | (m8 << 8));
    __m512 w[kPairs];
    #pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) w[p] = _mm512_loadu_ps(wp + p * kPairFloats);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m8, x + r * cols + full * kLanes));
      #pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) {
        acc[r][p] = _mm512_mask_add_ps(acc[r][p], m16, acc[r][p], _mm512_mul_ps(xv, w[p]));
      }
    }
  }
  cpu_lanes::StoreRows<R>(acc, bias, valid, out, out_stride);
}

using MicroFn = void (*)(const float* panel, const float* x, int64_t cols, const float* bias, int valid, float* out,
                         int64_t out_stride);
constexpr MicroFn kMicro[kTileRows] = {Micro<1>, Micro<2>, Micro<3>, Micro<4>, Micro<5>, Micro<6>};

template <bool kBf16>
void Drive(const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x, int64_t rows,
           const float* bias, float* out, int64_t out_stride) {
  thread_local std::vector<float> panel;
  const int64_t steps = (cols + kLanes - 1) / kLanes;
  panel.resize(static_cast<size_t>(steps * kPairs * kPairFloats));
  cpu_walk::WalkWeightGroups<kGroupRows, kTileRows>(
      w, cols, n0, n1, rows, cpu_walk::ActivationBlockRows<kTileRows>(cols * static_cast<int64_t>(sizeof(float))),
      [&](const uint16_t* const* group, int64_t, int) { Widen<kBf16>(group, cols, panel.data()); },
      [&](int64_t t, int r, int64_t g, int valid) {
        kMicro[r - 1](panel.data(), x + t * cols, cols, bias != nullptr ? bias + g : nullptr, valid,
                      out + t * out_stride + g, out_stride);
      });
}

#undef KVTIER_AVX512

}  // namespace

void Dot16PanelAvx512(bool bf16, const uint16_t* w, int64_t cols, int64_t n0, int64_t n1, const float* x,
                      int64_t rows, const float* bias, float* out, int64_t out_stride) {
  if (bf16) {
    Drive<true>(w, cols, n0, n1, x, rows, bias, out, out_stride);
  } else {
    Drive<false>(w, cols, n0, n1, x, rows, bias, out, out_stride);
  }
}

#else

void Dot16PanelAvx512(bool, const uint16_t*, int64_t, int64_t, int64_t, const float*, int64_t, const float*, float*,
                      int64_t) {}

#endif

}  // namespace kvtier
