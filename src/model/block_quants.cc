// Dequantization of the GGUF block formats, Q8_0 and Q4_K quantization (block_quants.h).
// Stateless; thread-safe.
#include "model/block_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

// Q4_K (qh == nullptr) and Q5_K: four chunks of 64 values; chunk c takes the low nibbles of
// 32 bytes for sub-block 2c and the high nibbles for 2c + 1; Q5_K's fifth bits for chunk c
// are bits 2c and 2c + 1 of qh.
void DequantizeK45(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  for (int c = 0; c < 4; ++c) {
    int s1, m1, s2, m2;
    KQuantScaleMin(scales, 2 * c, &s1, &m1);
    KQuantScaleMin(scales, 2 * c + 1, &s2, &m2);
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

// Sub-blocks 0-3 in the low six bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7
// in the nibbles of bytes 8-11 with their top two bits in the spare bits of bytes 0-7.
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

namespace {

// llama.cpp's nearest_int: rounds to nearest, halves to even (|x| < 2^22).
int NearestInt(float x) {
  const float shifted = x + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// llama.cpp's make_qkx2_quants for one sub-block of 32 with levels 0..15, rmin -1,
// rdelta 0.1, 20 steps and squared error: the scale returned, -min in *the_min, the
// levels in l. The float operations follow the reference's order, so the bits match.
float SubBlockScaleMin(const float* x, const float* weights, uint8_t* l, float* the_min) {
  constexpr int kN = 32, kMax = 15, kSteps = 20;
  constexpr float kRmin = -1.0f, kRdelta = 0.1f;
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < kN; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < kN; ++i) l[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = kMax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < kN; ++i) {
    l[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, kMax));
    const float diff = scale * l[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  uint8_t aux[kN];
  for (int is = 0; is <= kSteps; ++is) {
    iscale = (kRmin + kRdelta * is + kMax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < kN; ++i) {
      const int q = std::clamp(NearestInt(iscale * (x[i] - min)), 0, kMax);
      aux[i] = static_cast<uint8_t>(q);
      const float w = weights[i];
      sum_l += w * q;
      sum_l2 += w * q * q;
      sum_xl += w * q * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < kN; ++i) {
        const float diff = this_scale * aux[i] + this_min - x[i];
        error += weights[i] * (diff * diff);
      }
      if (error < best_error) {
        std::memcpy(l, aux, kN);
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

}  // namespace

void QuantizeQ4_K(const float* values, int64_t n, uint8_t* out) {
  for (int64_t block = 0; block < n / 256; ++block) {
    const float* x = values + 256 * block;
    uint8_t* b = out + 144 * block;
    uint8_t* packed_scales = b + 4;
    uint8_t* qs = b + 16;
    uint8_t levels[256];
    float scales[8], mins[8], weights[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0;
      for (int i = 0; i < 32; ++i) sum_x2 += x[32 * j + i] * x[32 * j + i];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int i = 0; i < 32; ++i) weights[i] = av_x + std::fabs(x[32 * j + i]);
      scales[j] = SubBlockScaleMin(x + 32 * j, weights, levels + 32 * j, &mins[j]);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    std::memset(packed_scales, 0, 12);
    for (int j = 0; j < 8; ++j) {
      const uint8_t ls = static_cast<uint8_t>(std::min(63, NearestInt(inv_scale * scales[j])));
      const uint8_t lm = static_cast<uint8_t>(std::min(63, NearestInt(inv_min * mins[j])));
      if (j < 4) {
        packed_scales[j] = ls;
        packed_scales[j + 4] = lm;
      } else {
        packed_scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        packed_scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        packed_scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    const uint16_t d = FloatToFp16(max_scale / 63.f), dmin = FloatToFp16(max_min / 63.f);
    b[0] = static_cast<uint8_t>(d & 0xFF);
    b[1] = static_cast<uint8_t>(d >> 8);
    b[2] = static_cast<uint8_t>(dmin & 0xFF);
    b[3] = static_cast<uint8_t>(dmin >> 8);
    for (int j = 0; j < 8; ++j) {
      int sc = 0, m = 0;
      KQuantScaleMin(packed_scales, j, &sc, &m);
      const float dj = Fp16ToFloat(d) * sc;
      if (dj == 0.0f) continue;
      const float dm = Fp16ToFloat(dmin) * m;
      for (int i = 0; i < 32; ++i) {
        levels[32 * j + i] = static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + i] + dm) / dj), 0, 15));
      }
    }
    for (int j = 0; j < 256; j += 64) {
      for (int i = 0; i < 32; ++i) qs[j / 2 + i] = static_cast<uint8_t>(levels[j + i] | (levels[j + i + 32] << 4));
    }
  }
}

bool CanQuantizeBlocks(DType dtype) { return dtype == DType::kQ8_0 || dtype == DType::kQ4_K; }

void QuantizeBlocks(DType dtype, const float* values, int64_t n, uint8_t* out) {
  if (dtype == DType::kQ4_K) {
    QuantizeQ4_K(values, n, out);
  } else {
    QuantizeQ8_0(values, n, out);
  }
}

}  // namespace kvtier
