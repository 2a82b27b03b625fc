// The AVX-512 attention pieces of attention_rows.h. Built with -ffp-contract=off: the
// multiplies and adds must stay separate, as the scalar code's are.
#include "backend/cpu/attention_rows.h"

#include <algorithm>

#include "backend/cpu/fold_lanes.h"
#include "backend/cpu/fold_pairs_avx512.h"
#include "common/cpu_features.h"

namespace kvtier {

#if defined(__x86_64__)
namespace {

using cpu_lanes::kLanes;
constexpr int kKeys = 16;  // scores per step: eight registers of two keys each

#define KVTIER_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")))

// kSteps: head_dim / 8.
template <int kSteps>
KVTIER_AVX512 void Scores(const float* q, const float* const* keys, int64_t n, float scale, float* scores) {
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < n; j0 += kKeys) {
    const int count = static_cast<int>(std::min<int64_t>(kKeys, n - j0));
    // A short last step repeats its last key; those scores are not stored.
    const float* k[kKeys];
    for (int i = 0; i < kKeys; ++i) k[i] = keys[j0 + std::min(i, count - 1)];
    __m512 acc[kKeys / 2];
    #pragma GCC unroll 8
    for (int p = 0; p < kKeys / 2; ++p) acc[p] = _mm512_setzero_ps();
    #pragma GCC unroll 16
    for (int s = 0; s < kSteps; ++s) {
      const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + s * kLanes));
      #pragma GCC unroll 8
      for (int p = 0; p < kKeys / 2; ++p) {
        const __m512 kv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(k[2 * p] + s * kLanes)),
                                             _mm256_loadu_ps(k[2 * p + 1] + s * kLanes), 1);
        acc[p] = _mm512_add_ps(acc[p], _mm512_mul_ps(qv, kv));
      }
    }
    const __m512 dots = cpu_lanes::FoldPairRows(acc, acc + 4);
    _mm512_mask_storeu_ps(scores + j0, static_cast<__mmask16>((1u << count) - 1), _mm512_mul_ps(dots, scale_v));
  }
}

// Each register holds one key's eight lanes for both queries (q0 low, q1 high): the key's
// eight columns are broadcast from memory, so no shuffle is needed per key.
template <int kSteps>
KVTIER_AVX512 void ScoresPair(const float* q0, const float* q1, const float* const* keys, int64_t n, float scale,
                              float* scores0, float* scores1) {
  constexpr int kPairKeys = 8;
  __m512 qq[kSteps];
  #pragma GCC unroll 16
  for (int s = 0; s < kSteps; ++s) {
    qq[s] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(q0 + s * kLanes)),
                               _mm256_loadu_ps(q1 + s * kLanes), 1);
  }
  const __m512 scale_v = _mm512_set1_ps(scale);
  // FoldPairRows leaves q0's and q1's scores interleaved; this puts q0's in the low half.
  const __m512i split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t j0 = 0; j0 < n; j0 += kPairKeys) {
    const int count = static_cast<int>(std::min<int64_t>(kPairKeys, n - j0));
    const float* k[kPairKeys];
    for (int i = 0; i < kPairKeys; ++i) k[i] = keys[j0 + std::min(i, count - 1)];
    __m512 acc[kPairKeys];
    #pragma GCC unroll 8
    for (int i = 0; i < kPairKeys; ++i) acc[i] = _mm512_setzero_ps();
    #pragma GCC unroll 16
    for (int s = 0; s < kSteps; ++s) {
      #pragma GCC unroll 8
      for (int i = 0; i < kPairKeys; ++i) {
        const __m512 kv = _mm512_broadcast_f32x8(_mm256_loadu_ps(k[i] + s * kLanes));
        acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(qq[s], kv));
      }
    }
    const __m512 dots =
        _mm512_mul_ps(_mm512_permutexvar_ps(split, cpu_lanes::FoldPairRows(acc, acc + 4)), scale_v);
    const __mmask8 mask = static_cast<__mmask8>((1u << count) - 1);
    _mm256_mask_storeu_ps(scores0 + j0, mask, _mm512_castps512_ps256(dots));
    _mm256_mask_storeu_ps(scores1 + j0, mask, _mm512_extractf32x8_ps(dots, 1));
  }
}

// kRegs: head_dim / 16.
template <int kRegs>
KVTIER_AVX512 void WeightedSum(const float* const* values, const float* probs, float inv_sum, int64_t n,
                               float* out) {
  __m512 acc[kRegs];
  #pragma GCC unroll 8
  for (int i = 0; i < kRegs; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 a = _mm512_set1_ps(probs[j] * inv_sum);
    const float* v = values[j];
    #pragma GCC unroll 8
    for (int i = 0; i < kRegs; ++i) acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(a, _mm512_loadu_ps(v + 16 * i)));
  }
  #pragma GCC unroll 8
  for (int i = 0; i < kRegs; ++i) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

#undef KVTIER_AVX512

}  // namespace

bool HasAttentionRows(int64_t head_dim) {
  static const bool has = CpuHasAvx512();
  return has && (head_dim == 64 || head_dim == 128);
}

void AttentionScores(const float* q, const float* const* keys, int64_t n, int64_t head_dim, float scale,
                     float* scores) {
  if (head_dim == 64) {
    Scores<8>(q, keys, n, scale, scores);
  } else {
    Scores<16>(q, keys, n, scale, scores);
  }
}

void AttentionScoresPair(const float* q0, const float* q1, const float* const* keys, int64_t n, int64_t head_dim,
                         float scale, float* scores0, float* scores1) {
  if (head_dim == 64) {
    ScoresPair<8>(q0, q1, keys, n, scale, scores0, scores1);
  } else {
    ScoresPair<16>(q0, q1, keys, n, scale, scores0, scores1);
  }
}

void AttentionWeightedSum(const float* const* values, const float* probs, float inv_sum, int64_t n,
                          int64_t head_dim, float* out) {
  if (head_dim == 64) {
    WeightedSum<4>(values, probs, inv_sum, n, out);
  } else {
    WeightedSum<8>(values, probs, inv_sum, n, out);
  }
}

#else

bool HasAttentionRows(int64_t) { return false; }
void AttentionScores(const float*, const float* const*, int64_t, int64_t, float, float*) {}
void AttentionScoresPair(const float*, const float*, const float* const*, int64_t, int64_t, float, float*, float*) {}
void AttentionWeightedSum(const float* const*, const float*, float, int64_t, int64_t, float*) {}

#endif

}  // namespace kvtier
