// Activation quantization (quant_activations.h). Stateless; thread-safe.
#include "backend/cpu/quant_activations.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/tensor.h"

namespace kvtier {
namespace {

// ggml's nearest_int: rounds half to even through the float adder (|v| < 2^22).
int NearestInt(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007FFFFF) - 0x00400000;
}

}  // namespace

int64_t ActivationBlockValues(DType weight_type) {
  return weight_type == DType::kQ8_0 || weight_type == DType::kQ4_0 ? kQ8_0Values : kQ8KValues;
}

size_t ActivationBlockBytes(DType weight_type) {
  return weight_type == DType::kQ8_0 || weight_type == DType::kQ4_0 ? kQ8_0Bytes : sizeof(BlockQ8K);
}

void QuantizeActivationsQ8_0(const float* x, int64_t n, uint8_t* out, float* scales) {
  if (HasQuantizeActivationsQ8_0Avx512()) {
    QuantizeActivationsQ8_0Avx512(x, n, out, scales);
    return;
  }
  QuantizeActivationsQ8_0Portable(x, n, out);
  for (int64_t i = 0; scales != nullptr && i < n / kQ8_0Values; ++i) {
    const uint8_t* block = out + i * kQ8_0Bytes;
    scales[i] = Fp16ToFloat(static_cast<uint16_t>(block[0] | (block[1] << 8)));
  }
}

void QuantizeActivationsQ8_0Portable(const float* x, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n / kQ8_0Values; ++i, x += kQ8_0Values, out += kQ8_0Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0Values; ++j) amax = std::max(amax, std::fabs(x[j]));
    const uint16_t d = FloatToFp16(amax / 127.0f);
    out[0] = static_cast<uint8_t>(d & 0xFF);
    out[1] = static_cast<uint8_t>(d >> 8);
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kQ8_0Values; ++j) {
      // nearbyint rounds half to even in the default rounding mode, as _mm256_round_ps does.
      // A product that is not finite (a NaN value, an infinite block's 0 x inf, or a block so
      // tiny that its inverse overflows) has no int8: it gives 0, the byte the vector code's
      // conversion leaves (converting it in C++ would be undefined).
      const float q = std::nearbyint(x[j] * inverse);
      out[2 + j] = std::isfinite(q) ? static_cast<uint8_t>(static_cast<int8_t>(q)) : 0;
    }
  }
}

void QuantizeActivationsQ8K(const float* x, int64_t n, BlockQ8K* out) {
  for (int64_t i = 0; i < n / kQ8KValues; ++i, x += kQ8KValues, ++out) {
    float max = 0.0f;
    float amax = 0.0f;
    for (int j = 0; j < kQ8KValues; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(out, 0, sizeof(*out));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQ8KValues; ++j) out->qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
    for (int j = 0; j < kQ8KValues / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += out->qs[16 * j + l];
      out->bsums[j] = static_cast<int16_t>(sum);
    }
    out->d = 1.0f / iscale;
  }
}

}  // namespace kvtier
