// The eight fp32 partial sums every CPU dot product keeps per output, and their fold: the
// fixed order that lets the reference (cpu_ops.cc), the integer kernels (quant_dot.h) and
// the 16-bit kernels (dot16.h) state their bits exactly. Pure functions; thread-safe.
// Internal linkage, so each file's copy is compiled for its own instruction set.
#ifndef KVTIER_BACKEND_CPU_FOLD_LANES_H_
#define KVTIER_BACKEND_CPU_FOLD_LANES_H_

namespace kvtier::cpu_lanes {

inline constexpr int kLanes = 8;

// acc[l] += acc[l + 4], then acc[l] += acc[l + 2], then acc[0] += acc[1]; returns acc[0].
[[gnu::always_inline]] static inline float FoldLanes(float* acc) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

}  // namespace kvtier::cpu_lanes

#endif  // KVTIER_BACKEND_CPU_FOLD_LANES_H_
