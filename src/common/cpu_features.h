// CPU features that __builtin_cpu_supports cannot name on every compiler the project builds
// with (clang 14 knows no "f16c"): read from cpuid directly.
#ifndef KVTIER_COMMON_CPU_FEATURES_H_
#define KVTIER_COMMON_CPU_FEATURES_H_

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kvtier {

// The F16C half <-> single conversions (vcvtph2ps, vcvtps2ph).
inline bool CpuHasF16c() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_CPU_FEATURES_H_
