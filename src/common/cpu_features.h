// The x86 features the CPU kernels choose by at run time. F16C is read from cpuid directly
// (clang 14's __builtin_cpu_supports knows no "f16c"); the AVX-512 sets are the ones the
// kernels' target attributes name.
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

// AVX-512 F, DQ, BW and VL: what the 512-bit float and byte kernels use.
inline bool CpuHasAvx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// CpuHasAvx512 and the VNNI int8 dot products (vpdpbusd).
inline bool CpuHasAvx512Vnni() {
#if defined(__x86_64__)
  return CpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// CpuHasAvx512 and the BF16 conversions and dot products (vcvtne2ps2bf16, vdpbf16ps):
// cpuid leaf 7, sub-leaf 1, eax bit 5, read directly as for F16C.
inline bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return CpuHasAvx512() && (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_CPU_FEATURES_H_
