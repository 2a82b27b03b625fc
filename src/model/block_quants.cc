// Dequantization of the GGUF block formats and Q8_0 quantization (block_quants.h).
// Stateless; thread-safe.
#include "model/block_quants.h"

#include <algorithm>
#include <cmath>

namespace kvtier {
namespace {

float Half(const uint8_t* p) { return Fp16ToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

void DequantizeQ8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

void DequantizeQ4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, packed in 12 bytes:
// sub-blocks 0-3 in the low six bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7
// in the nibbles of bytes 8-11 with their top two bits in the spare bits of bytes 0-7.
void ScaleMin(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Q4_K (qh == nullptr) and Q5_K: four chunks of 64 values; chunk c takes the low nibbles of
// 32 bytes for sub-block 2c and the high nibbles for 2c + 1; Q5_K's fifth bits for chunk c
// are bits 2c and 2c + 1 of qh.
void DequantizeK45(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  for (int c = 0; c < 4; ++c) {
    int s1, m1, s2, m2;
    ScaleMin(scales, 2 * c, &s1, &m1);
    ScaleMin(scales, 2 * c + 1, &s2, &m2);
    const float d1 = d * static_cast<float>(s1), min1 = dmin * static_cast<float>(m1);
    const float d2 = d * static_cast<float>(s2), min2 = dmin * static_cast<float>(m2);
    const uint8_t* q = qs + 32 * c;
    const int low_bit = 1 << (2 * c), high_bit = 2 << (2 * c);
    for (int l = 0; l < 32; ++l) {
      const int high1 = qh != nullptr && (qh[l] & low_bit) ? 16 : 0;
      const int high2 = qh != nullptr && (qh[l] & high_bit) ? 16 : 0;
      y[64 * c + l] = d1 * static_cast<float>((q[l] & 0x0F) + high1) - min1;
      y[64 * c + 32 + l] = d2 * static_cast<float>((q[l] >> 4) + high2) - min2;
    }
  }
}

// Q6_K: two halves of 128 values; in half n, value l (< 32) and its three companions at
// +32, +64, +96 take their low four bits from ql and their top two bits from one qh byte.
void DequantizeQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* l4 = ql + 64 * n;
    const uint8_t* h2 = qh + 32 * n;
    const int8_t* sc = scales + 8 * n;
    float* out = y + 128 * n;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((l4[l] & 0x0F) | (((h2[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((l4[l + 32] & 0x0F) | (((h2[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

void DequantizeBlocks(DType dtype, const uint8_t* blocks, int64_t num_elements, float* out) {
  const int64_t per_block = DTypeBlockElements(dtype);
  const size_t block_bytes = DTypeBlockBytes(dtype);
  const int64_t num_blocks = num_elements / per_block;
  for (int64_t i = 0; i < num_blocks; ++i) {
    const uint8_t* b = blocks + static_cast<size_t>(i) * block_bytes;
    float* y = out + i * per_block;
    switch (dtype) {
      case DType::kQ8_0:
        DequantizeQ8_0(b, y);
        break;
      case DType::kQ4_0:
        DequantizeQ4_0(b, y);
        break;
      case DType::kQ4_K:
        DequantizeK45(b, nullptr, b + 16, y);
        break;
      case DType::kQ5_K:
        DequantizeK45(b, b + 16, b + 48, y);
        break;
      case DType::kQ6_K:
        DequantizeQ6_K(b, y);
        break;
      default:
        std::fill(y, y + per_block, 0.0f);  // not a block type: callers never pass one
        break;
    }
  }
}

void QuantizeQ8_0(const float* values, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n / 32; ++i) {
    const float* x = values + 32 * i;
    uint8_t* b = out + 34 * i;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t half = FloatToFp16(d);
    b[0] = static_cast<uint8_t>(half & 0xFF);
    b[1] = static_cast<uint8_t>(half >> 8);
    for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * inverse)));
  }
}

}  // namespace kvtier
