// Pieces every quant_dot implementation shares, so that their float arithmetic is the same
// code. Internal to quant_dot*.cc; functions have internal linkage, so each file's copy is
// compiled for its own instruction set without crossing into another's.
#ifndef KVTIER_BACKEND_CPU_QUANT_DOT_INTERNAL_H_
#define KVTIER_BACKEND_CPU_QUANT_DOT_INTERNAL_H_

#include <cstdint>
#include <cstring>

#include "backend/cpu/fold_lanes.h"
#include "backend/cpu/quant_activations.h"

namespace kvtier::quant_dot_internal {

using cpu_lanes::FoldLanes;  // the quant_dot.h fold of the eight lanes
using cpu_lanes::kLanes;

[[gnu::always_inline]] static inline uint16_t Bits16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

[[gnu::always_inline]] static inline const BlockQ8K* Q8K(const uint8_t* activations) {
  return reinterpret_cast<const BlockQ8K*>(activations);
}

// One K-type super-block's contribution, given its exact integer totals.
[[gnu::always_inline]] static inline void AccumulateK(float d_w, float dmin_w, float d_a, int32_t total,
                                                      int32_t mins, float* sum) {
  const float d = d_w * d_a;
  *sum += d * static_cast<float>(total);
  const float dmin = dmin_w * d_a;
  *sum -= dmin * static_cast<float>(mins);
}

// Sum of the Q8_K block sums of 32-value sub-block j.
[[gnu::always_inline]] static inline int32_t SubBlockSum(const BlockQ8K& a, int j) {
  return a.bsums[2 * j] + a.bsums[2 * j + 1];
}

// Sum over the eight Q4_K/Q5_K sub-blocks of min_j x (their activations' sum).
int32_t KQuantMinsDot(const uint8_t* scales, const BlockQ8K& a);

}  // namespace kvtier::quant_dot_internal

#endif  // KVTIER_BACKEND_CPU_QUANT_DOT_INTERNAL_H_
