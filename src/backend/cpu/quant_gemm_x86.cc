// The Q8_0 kernel of quant_gemm.h. Built with -ffp-contract=off: the float operations must
// stay quant_dot.h's, never fused.
#include "backend/cpu/quant_gemm.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/fold_lanes.h"
#include "backend/cpu/fold_pairs_avx512.h"
#include "backend/cpu/quant_activations.h"
#include "backend/cpu/weight_group_walk.h"
#include "common/cpu_features.h"

namespace kvtier {

#if defined(__x86_64__)
namespace {

constexpr int kGroupRows = 8;           // weight rows per panel
constexpr int kPairs = kGroupRows / 2;  // registers per activation row: two weight rows each
constexpr int kTileRows = 4;            // activation rows per micro-kernel call
constexpr int kQuants = 32;             // values of a Q8_0 block
// A packed pair: both rows' quants (64 bytes), the negated lane sums x 128 (16 int32) and
// both rows' scales, each repeated over its eight lanes (16 floats).
constexpr size_t kPairBytes = 3 * 64;
constexpr size_t kBlockBytes = kPairs * kPairBytes;

#define KVTIER_VNNI __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512vnni")))

KVTIER_VNNI inline float Half(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

KVTIER_VNNI inline __m512i LoadTwo(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// The panel of weight rows w[0..8), block after block (kBlockBytes each).
KVTIER_VNNI void Pack(const uint8_t* const* w, int64_t num_blocks, uint8_t* panel) {
  const __m512i bias128 = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < num_blocks; ++b) {
    #pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) {
      const uint8_t* w0 = w[2 * p] + b * kQ8_0Bytes;
      const uint8_t* w1 = w[2 * p + 1] + b * kQ8_0Bytes;
      uint8_t* out = panel + b * kBlockBytes + p * kPairBytes;
      const __m512i q = LoadTwo(w0 + 2, w1 + 2);
      const __m512i surplus = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias128, q);
      const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(Half(w0)), _mm256_set1_ps(Half(w1)), 1);
      _mm512_storeu_si512(out, q);
      _mm512_storeu_si512(out + 64, _mm512_sub_epi32(_mm512_setzero_si512(), surplus));
      _mm512_storeu_ps(out + 128, d);
    }
  }
}

// R activation rows against one panel; writes `valid` outputs of each row at
// out + r * out_stride, plus bias.
template <int R>
KVTIER_VNNI void Micro(const uint8_t* panel, const uint8_t* act, size_t act_stride, const float* scales,
                       int64_t num_blocks, const float* bias, int valid, float* out, int64_t out_stride) {
  __m512 acc[R][kPairs];
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* pb = panel + b * kBlockBytes;
    __m512i a[R];  // activation + 128, as unsigned bytes, in both halves
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* block = act + r * act_stride + b * kQ8_0Bytes + 2;
      a[r] = _mm512_xor_si512(
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block))), flip);
    }
    #pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) {
      const uint8_t* pair = pb + p * kPairBytes;
      const __m512i q = _mm512_loadu_si512(pair);
      const __m512i start = _mm512_loadu_si512(pair + 64);
      const __m512 d_w = _mm512_loadu_ps(reinterpret_cast<const float*>(pair + 128));
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i lanes = _mm512_dpbusd_epi32(start, a[r], q);
        const __m512 d = _mm512_mul_ps(d_w, _mm512_set1_ps(scales[r * num_blocks + b]));
        acc[r][p] = _mm512_add_ps(acc[r][p], _mm512_mul_ps(_mm512_cvtepi32_ps(lanes), d));
      }
    }
  }
  cpu_lanes::StoreRows<R>(acc, bias, valid, out, out_stride);
}

using MicroFn = void (*)(const uint8_t* panel, const uint8_t* act, size_t act_stride, const float* scales,
                         int64_t num_blocks, const float* bias, int valid, float* out, int64_t out_stride);
constexpr MicroFn kMicro[kTileRows] = {Micro<1>, Micro<2>, Micro<3>, Micro<4>};

#undef KVTIER_VNNI

}  // namespace

bool HasQ8_0Gemm() {
  static const bool has = CpuHasAvx512Vnni() && CpuHasF16c();
  return has;
}

void Q8_0Gemm(const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, const uint8_t* act, size_t act_stride,
              const float* scales, int64_t rows, int64_t num_blocks, const float* bias, float* out,
              int64_t out_stride) {
  thread_local std::vector<uint8_t> panel;
  panel.resize(static_cast<size_t>(num_blocks) * kBlockBytes);
  // An activation row in cache: its codes and its blocks' scales.
  const int64_t row_bytes_in_cache =
      static_cast<int64_t>(act_stride) + num_blocks * static_cast<int64_t>(sizeof(float));
  cpu_walk::WalkWeightGroups<kGroupRows, kTileRows>(
      w, static_cast<int64_t>(row_bytes), n0, n1, rows, cpu_walk::ActivationBlockRows<kTileRows>(row_bytes_in_cache),
      [&](const uint8_t* const* group, int64_t, int) { Pack(group, num_blocks, panel.data()); },
      [&](int64_t t, int r, int64_t g, int valid) {
        kMicro[r - 1](panel.data(), act + t * act_stride, act_stride, scales + t * num_blocks, num_blocks,
                      bias != nullptr ? bias + g : nullptr, valid, out + t * out_stride + g, out_stride);
      });
}

#else

bool HasQ8_0Gemm() { return false; }
void Q8_0Gemm(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, const float*, int64_t, int64_t,
              const float*, float*, int64_t) {}

#endif

}  // namespace kvtier
