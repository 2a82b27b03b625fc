// Quantization of activation rows for the integer dot products of quant_dot.h, block by
// block as ggml quantizes the "vec_dot_type" of a quantized matrix, so that a product
// against a GGUF file's blocks reproduces llama.cpp's CPU arithmetic:
//   Q8_0 (for Q8_0 and Q4_0 weights): 32 values, 34 bytes: half d; int8 q[32].
//     amax = max |x|, d = amax / 127 stored as half, q = round-half-even(x * (127 / amax)).
//   Q8_K (for Q4_K, Q5_K and Q6_K weights): 256 values, 292 bytes: float d; int8 q[256];
//     int16 bsums[16] (sums of each 16 consecutive q). With max the value of largest
//     magnitude, iscale = -127 / max, q = min(127, nearest(iscale * x)), d = 1 / iscale.
// Pure functions; thread-safe.
#ifndef KVTIER_BACKEND_CPU_QUANT_ACTIVATIONS_H_
#define KVTIER_BACKEND_CPU_QUANT_ACTIVATIONS_H_

#include <cstddef>
#include <cstdint>

#include "model/dtype.h"

namespace kvtier {

inline constexpr int64_t kQ8_0Values = 32;
inline constexpr size_t kQ8_0Bytes = 34;
inline constexpr int64_t kQ8KValues = 256;

struct BlockQ8K {
  float d;
  int8_t qs[kQ8KValues];
  int16_t bsums[kQ8KValues / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

// The activation format the dot products against weights of `weight_type` read: kQ8_0 for
// Q8_0 and Q4_0, the Q8_K format (reported as kQ4_K's geometry: 256 values) for the K
// types. Only meaningful for a type HasQuantDot accepts.
int64_t ActivationBlockValues(DType weight_type);
size_t ActivationBlockBytes(DType weight_type);

// Quantizes n values (a multiple of 32) into Q8_0 blocks at out; where scales is not null,
// scales[i] = block i's scale d widened to fp32. Vectorized where the processor allows,
// with the portable code's bytes.
void QuantizeActivationsQ8_0(const float* x, int64_t n, uint8_t* out, float* scales = nullptr);
// The portable code, and the AVX-512 code (F, DQ, BW, VL; HasQuantizeActivationsQ8_0Avx512),
// for tests comparing them.
void QuantizeActivationsQ8_0Portable(const float* x, int64_t n, uint8_t* out);
void QuantizeActivationsQ8_0Avx512(const float* x, int64_t n, uint8_t* out, float* scales);
bool HasQuantizeActivationsQ8_0Avx512();
// Quantizes n values (a multiple of 256) into Q8_K blocks at out.
void QuantizeActivationsQ8K(const float* x, int64_t n, BlockQ8K* out);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CPU_QUANT_ACTIVATIONS_H_
