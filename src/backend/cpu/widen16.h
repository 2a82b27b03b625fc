// Widening of fp16 and bf16 arrays to fp32 (exact), with F16C / AVX-512 where the processor
// has them (chosen at run time) and a portable loop otherwise; every path gives the same
// values. Pure functions; thread-safe.
#ifndef KVTIER_BACKEND_CPU_WIDEN16_H_
#define KVTIER_BACKEND_CPU_WIDEN16_H_

#include <cstdint>

namespace kvtier {

void WidenFp16(const uint16_t* in, int64_t n, float* out);
void WidenBf16(const uint16_t* in, int64_t n, float* out);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_WIDEN16_H_
