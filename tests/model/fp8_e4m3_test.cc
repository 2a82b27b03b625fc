// FP8 E4M3 conversions (common/fp8_e4m3.h) checked bit-exactly against a reference derived
// independently: code values from the format's definition in double arithmetic, and
// narrowing as "the nearest code, ties to the even code, |x| > 448 saturates" by search.
#include "common/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace kvtier {
namespace {

// The value of a code by the format's definition: (-1)^s * 2^(e-7) * (1 + m/8), or
// (-1)^s * 2^-6 * m/8 for e == 0; S.1111.111 is NaN.
double ReferenceValue(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -magnitude : magnitude;
}

// Nearest non-NaN code by exhaustive search; ties go to the code with an even mantissa.
uint8_t ReferenceEncode(float value) {
  if (std::isnan(value)) return std::signbit(value) ? 0xff : 0x7f;
  const double x = std::fmax(-448.0, std::fmin(448.0, static_cast<double>(value)));
  int best = -1;
  double best_distance = 0;
  for (int code = 0; code < 256; ++code) {
    const double v = ReferenceValue(code);
    if (std::isnan(v)) continue;
    if (v == 0 && std::signbit(v) != std::signbit(value)) continue;  // keep the sign of zero
    const double distance = std::fabs(v - x);
    if (best < 0 || distance < best_distance ||
        (distance == best_distance && (code & 1) == 0 && (best & 1) == 1)) {
      best = code;
      best_distance = distance;
    }
  }
  // A nonzero value that rounds to zero keeps its sign: search the zero of that sign.
  if (ReferenceValue(best) == 0) return std::signbit(value) ? 0x80 : 0x00;
  return static_cast<uint8_t>(best);
}

float BitsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

TEST(Fp8E4M3Test, EveryCodeDecodesToItsDefinedValue) {
  for (int code = 0; code < 256; ++code) {
    const double want = ReferenceValue(code);
    const float got = Fp8E4M3ToFloat(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << code;
    EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << code;
  }
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));
}

TEST(Fp8E4M3Test, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const float f = Fp8E4M3ToFloat(static_cast<uint8_t>(code));
    EXPECT_EQ(FloatToFp8E4M3(f), code) << code;
  }
}

TEST(Fp8E4M3Test, MidpointsAndNeighboursRoundLikeTheReference) {
  // Between every pair of adjacent positive codes: the midpoint (the tie) and the floats
  // one ulp either side of it, both signs; also one ulp around every code.
  std::vector<float> probes;
  for (int code = 0; code < 0x7e; ++code) {
    const float lo = Fp8E4M3ToFloat(static_cast<uint8_t>(code));
    const float hi = Fp8E4M3ToFloat(static_cast<uint8_t>(code + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), lo,
                    std::nextafter(lo, 0.0f), std::nextafter(lo, 1000.0f)}) {
      probes.push_back(f);
      probes.push_back(-f);
    }
  }
  for (float f : probes) {
    ASSERT_EQ(FloatToFp8E4M3(f), ReferenceEncode(f)) << f;
  }
}

TEST(Fp8E4M3Test, EveryBf16PatternAndRandomFloatsRoundLikeTheReference) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BitsFloat(b << 16);
    ASSERT_EQ(FloatToFp8E4M3(f), ReferenceEncode(f)) << std::hexfloat << f;
  }
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = (i & 1 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(FloatToFp8E4M3(f), ReferenceEncode(f)) << std::hexfloat << f;
  }
}

TEST(Fp8E4M3Test, SaturatesAndKeepsNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(463.9f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7e);  // the tie with the missing 480 still saturates
  EXPECT_EQ(FloatToFp8E4M3(1e30f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(inf), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-inf), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::max()), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);           // half the smallest: even
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(3.0f, -10)), 0x02);           // 1.5 units: tie to 2
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(15.0f, -10)), 0x08);          // 7.5 units: carries to 2^-6
}

}  // namespace
}  // namespace kvtier
