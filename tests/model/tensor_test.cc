// Tests of dtype conversions (exhaustive round trips, round-to-nearest-even, specials) and
// TensorView element access.
#include "model/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace kvtier {
namespace {

TEST(TensorTest, DTypeNamesAndSizes) {
  EXPECT_EQ(DTypeName(DType::kF32), "F32");
  EXPECT_EQ(DTypeName(DType::kF16), "F16");
  EXPECT_EQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
}

TEST(TensorTest, Bf16RoundTripsEveryNonNanPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f)))) << b;
      continue;
    }
    ASSERT_EQ(FloatToBf16(f), b) << b;
  }
}

TEST(TensorTest, Fp16RoundTripsEveryNonNanPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Fp16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(f)))) << b;
      continue;
    }
    ASSERT_EQ(FloatToFp16(f), b) << b;
  }
}

TEST(TensorTest, Fp16KnownValues) {
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_FLOAT_EQ(Fp16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
}

TEST(TensorTest, RoundToNearestEven) {
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), FloatToBf16(1.0f));
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), FloatToBf16(1.0f + std::ldexp(1.0f, -6)));
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            FloatToBf16(1.0f + std::ldexp(1.0f, -7)));
  // fp16 keeps 10: 1 + 2^-11 is halfway.
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Subnormal ties: 2^-25 is half the smallest subnormal -> 0 (even); 3 * 2^-25 -> 2 units.
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToFp16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToFp16(1.5f * std::ldexp(1.0f, -25)), 0x0001);
  // Overflow boundary: 65519 -> max finite, 65520 (the tie) -> inf.
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
}

TEST(TensorTest, InfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FloatToBf16(inf), 0x7f80);
  EXPECT_EQ(FloatToBf16(-inf), 0xff80);
  EXPECT_EQ(FloatToFp16(inf), 0x7c00);
  EXPECT_EQ(FloatToFp16(-inf), 0xfc00);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(nan))));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(nan))));
  // A NaN whose payload sits only in the low bits must not truncate to inf.
  uint32_t low_payload = 0x7f800001;
  float snan;
  std::memcpy(&snan, &low_payload, 4);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(snan))));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(snan))));
  EXPECT_TRUE(std::isinf(Fp16ToFloat(0x7c00)));
}

// Property: the narrowed value is the nearest representable one, ties to an even pattern.
template <typename ToBits, typename FromBits>
void ExpectNearestEven(float v, ToBits to, FromBits from) {
  const uint16_t h = to(v);
  const double got = from(h);
  if (std::isinf(got)) return;  // overflow handled by the known-value tests
  const double err = std::fabs(got - v);
  for (int delta : {-1, 1}) {
    const uint16_t n = static_cast<uint16_t>(h + delta);
    const double other = from(n);
    if (std::isnan(other) || std::isinf(other) || std::signbit(other) != std::signbit(got)) continue;
    const double other_err = std::fabs(other - v);
    ASSERT_LE(err, other_err) << v;
    if (err == other_err) {
      ASSERT_EQ(h & 1, 0) << v;
    }
  }
}

TEST(TensorTest, RandomValuesRoundToNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-30.0f, 16.0f);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    float v = std::ldexp(mantissa(rng), static_cast<int>(exponent(rng)));
    if (i % 2) v = -v;
    ExpectNearestEven(v, FloatToFp16, Fp16ToFloat);
    ExpectNearestEven(v, FloatToBf16, Bf16ToFloat);
  }
}

TEST(TensorTest, TensorViewElementsFromUnalignedData) {
  const float values[3] = {1.5f, -2.25f, 1e-3f};
  std::vector<uint8_t> storage(1 + sizeof(values));
  std::memcpy(storage.data() + 1, values, sizeof(values));  // deliberately misaligned
  TensorView f32{"x", DType::kF32, {3}, storage.data() + 1};
  EXPECT_EQ(f32.num_elements(), 3);
  EXPECT_EQ(f32.nbytes(), 12u);
  EXPECT_EQ(f32.ElementAsFloat(1), -2.25f);
  std::vector<float> out;
  ToFloat32(f32, &out);
  EXPECT_EQ(out, std::vector<float>(values, values + 3));

  std::vector<uint8_t> half_bytes;
  for (float v : values) {
    uint16_t b = FloatToBf16(v);
    half_bytes.push_back(static_cast<uint8_t>(b));
    half_bytes.push_back(static_cast<uint8_t>(b >> 8));
  }
  TensorView bf16{"y", DType::kBF16, {1, 3}, half_bytes.data()};
  EXPECT_EQ(bf16.nbytes(), 6u);
  ToFloat32(bf16, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.25f);
  EXPECT_NEAR(out[2], 1e-3f, 1e-5f);

  half_bytes.clear();
  for (float v : values) {
    uint16_t b = FloatToFp16(v);
    half_bytes.push_back(static_cast<uint8_t>(b));
    half_bytes.push_back(static_cast<uint8_t>(b >> 8));
  }
  TensorView f16{"z", DType::kF16, {3, 1}, half_bytes.data()};
  EXPECT_EQ(f16.ElementAsFloat(0), 1.5f);
  EXPECT_EQ(f16.ElementAsFloat(1), -2.25f);
  EXPECT_NEAR(f16.ElementAsFloat(2), 1e-3f, 1e-6f);
}

TEST(TensorTest, ScalarShapeHasOneElement) {
  TensorView scalar{"s", DType::kF32, {}, nullptr};
  EXPECT_EQ(scalar.num_elements(), 1);
  TensorView empty{"e", DType::kF32, {0, 4}, nullptr};
  EXPECT_EQ(empty.num_elements(), 0);
}

}  // namespace
}  // namespace kvtier
