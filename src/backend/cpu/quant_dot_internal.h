// Pieces every quant_dot implementation shares, so that their float arithmetic is the same
// code. Internal to quant_dot*.cc; functions have internal linkage, so each file's copy is
// compiled for its own instruction set without crossing into another's.
#ifndef KVTIER_BACKEND_CPU_QUANT_DOT_INTERNAL_H_
#define KVTIER_BACKEND_CPU_QUANT_DOT_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/fold_lanes.h"
#include "backend/cpu/quant_activations.h"
#include "model/block_quants.h"

namespace kvtier::quant_dot_internal {

using cpu_lanes::FoldLanes;  // the quant_dot.h fold of the eight lanes
using cpu_lanes::kLanes;

[[gnu::always_inline]] static inline uint16_t Bits16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

[[gnu::always_inline]] static inline const BlockQ8K* Q8K(const uint8_t* activations) {
  return reinterpret_cast<const BlockQ8K*>(activations);
}

// Q4_K's float part (quant_dot.h): pair p's exact total, and its min term, each added by one
// fused multiply-add.
[[gnu::always_inline]] static inline void AccumulateQ4_K(float d_w, float dmin_w, float d_a, const int32_t* totals,
                                                         const int32_t* mins, float* acc, float* acc_min) {
  const float d = d_w * d_a;
  const float dmin = dmin_w * d_a;
  for (int p = 0; p < 4; ++p) {
    *acc = std::fmaf(static_cast<float>(totals[p]), d, *acc);
    *acc_min = std::fmaf(static_cast<float>(mins[p]), dmin, *acc_min);
  }
}

// Q5_K's and Q6_K's float part (quant_dot.h): lane l of acc adds d x lanes[l] fused.
[[gnu::always_inline]] static inline void AccumulateLanes(float d, const int32_t* lanes, float* acc) {
  for (int l = 0; l < kLanes; ++l) acc[l] = std::fmaf(d, static_cast<float>(lanes[l]), acc[l]);
}

// Sum of the Q8_K block sums of 32-value sub-block j.
[[gnu::always_inline]] static inline int32_t SubBlockSum(const BlockQ8K& a, int j) {
  return a.bsums[2 * j] + a.bsums[2 * j + 1];
}

// mins[p] = min_2p x sum_2p + min_2p+1 x sum_2p+1 over the Q4_K/Q5_K sub-blocks of pair p
// (sum_j: their activations' sum).
[[gnu::always_inline]] static inline void KQuantPairMins(const uint8_t* scales, const BlockQ8K& a, int32_t* mins) {
  for (int p = 0; p < 4; ++p) {
    int scale, min_low, min_high;
    KQuantScaleMin(scales, 2 * p, &scale, &min_low);
    KQuantScaleMin(scales, 2 * p + 1, &scale, &min_high);
    mins[p] = min_low * SubBlockSum(a, 2 * p) + min_high * SubBlockSum(a, 2 * p + 1);
  }
}

}  // namespace kvtier::quant_dot_internal

#endif  // KVTIER_BACKEND_CPU_QUANT_DOT_INTERNAL_H_
