// bf16/fp16 <-> float conversions and TensorView element access (tensor.h).
// Stateless; thread-safe.
#include "model/tensor.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp8_e4m3.h"
#include "model/block_quants.h"

namespace kvtier {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

float Bf16ToFloat(uint16_t bits) { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBf16(float value) {
  uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep NaN a (quiet) NaN
  }
  // Round to nearest, ties to even; overflow carries into the exponent and yields inf.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Fp16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToFp16(float value) {
  uint32_t x = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / inf
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds (ties-to-even) to inf
  if (x >= 0x38800000u) {                       // normal half (>= 2^-14)
    const uint32_t mantissa = x & 0x7fffffu;
    uint32_t h = ((((x >> 23) - 127 + 15)) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half: value / 2^-24 rounded to nearest even.
  const int exponent = static_cast<int>(x >> 23) - 127;
  const int shift = -(exponent + 1);  // >= 14 here
  if (shift > 24) return sign;
  const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
  uint32_t h = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float TensorView::ElementAsFloat(int64_t i) const {
  switch (dtype) {
    case DType::kF32: {
      float value;
      std::memcpy(&value, data + i * 4, sizeof(value));  // safetensors data may be unaligned
      return value;
    }
    case DType::kF16:
      return Fp16ToFloat(Load16(data + i * 2));
    case DType::kBF16:
      return Bf16ToFloat(Load16(data + i * 2));
    case DType::kF8E4M3:
      return Fp8E4M3ToFloat(data[i]);
    default: {
      const int64_t per_block = DTypeBlockElements(dtype);
      std::vector<float> block(static_cast<size_t>(per_block));
      DequantizeBlocks(dtype, data + static_cast<size_t>(i / per_block) * DTypeBlockBytes(dtype), per_block,
                       block.data());
      return block[static_cast<size_t>(i % per_block)];
    }
  }
}

void ToFloat32(const TensorView& tensor, std::vector<float>* out) {
  const int64_t n = tensor.num_elements();
  out->resize(static_cast<size_t>(n));
  if (tensor.dtype == DType::kF32) {
    std::memcpy(out->data(), tensor.data, static_cast<size_t>(n) * 4);
    return;
  }
  if (IsBlockQuantized(tensor.dtype)) {
    DequantizeBlocks(tensor.dtype, tensor.data, n, out->data());
    return;
  }
  for (int64_t i = 0; i < n; ++i) (*out)[i] = tensor.ElementAsFloat(i);
}

}  // namespace kvtier
