// Tests of the GGUF block formats: blocks packed here from chosen scales and codes, bit by
// bit as the format lays them out, must dequantize to scale x code; Q8_0 quantization
// round-trips within half a step. (llama.cpp itself checks the same code on the files its
// quantizer writes: tests/gguf.)
#include "model/block_quants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kvtier {
namespace {

void PutHalf(uint8_t* p, float value) {
  const uint16_t h = FloatToFp16(value);
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

std::vector<float> Dequantize(DType dtype, const std::vector<uint8_t>& block) {
  std::vector<float> out(static_cast<size_t>(DTypeBlockElements(dtype)));
  DequantizeBlocks(dtype, block.data(), DTypeBlockElements(dtype), out.data());
  return out;
}

// Six-bit scales and mins of Q4_K / Q5_K's eight sub-blocks, packed into 12 bytes.
void PackScales(const int sc[8], const int m[8], uint8_t* scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}

TEST(BlockQuantsTest, Geometry) {
  EXPECT_EQ(DTypeBlockElements(DType::kQ8_0), 32);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ8_0), 34u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_0), 18u);
  EXPECT_EQ(DTypeBlockElements(DType::kQ4_K), 256);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_K), 144u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ5_K), 176u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ6_K), 210u);
  EXPECT_EQ(DTypeBytes(DType::kQ6_K, 512), 420u);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 3), 6u);
  EXPECT_FALSE(IsBlockQuantized(DType::kF32));
  EXPECT_TRUE(IsBlockQuantized(DType::kQ5_K));
  EXPECT_EQ(DTypeName(DType::kQ4_K), "Q4_K");
}

TEST(BlockQuantsTest, Q8_0AndQ4_0) {
  std::vector<uint8_t> q8(34);
  PutHalf(q8.data(), 0.5f);
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  std::vector<float> y = Dequantize(DType::kQ8_0, q8);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(j * 8 - 128)) << j;

  std::vector<uint8_t> q4(18);
  PutHalf(q4.data(), -2.0f);
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  y = Dequantize(DType::kQ4_0, q4);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -2.0f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y[j + 16], -2.0f * static_cast<float>(15 - j - 8)) << j;
  }
}

TEST(BlockQuantsTest, Q4_KAndQ5_K) {
  std::mt19937 rng(5);
  const int sc[8] = {1, 63, 17, 40, 5, 33, 62, 48};
  const int m[8] = {0, 9, 63, 21, 60, 2, 47, 31};
  for (bool five : {false, true}) {
    std::vector<int> q(256);
    for (int& v : q) v = static_cast<int>(rng() % (five ? 32 : 16));
    const DType dtype = five ? DType::kQ5_K : DType::kQ4_K;
    std::vector<uint8_t> block(DTypeBlockBytes(dtype), 0);
    const float d = 0.125f, dmin = 0.0625f;
    PutHalf(block.data(), d);
    PutHalf(block.data() + 2, dmin);
    PackScales(sc, m, block.data() + 4);
    uint8_t* qh = five ? block.data() + 16 : nullptr;
    uint8_t* qs = block.data() + (five ? 48 : 16);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        if (five) qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
    const std::vector<float> y = Dequantize(dtype, block);
    for (int i = 0; i < 256; ++i) {
      const int sub = i / 32;
      const float want = d * static_cast<float>(sc[sub]) * static_cast<float>(q[i]) - dmin * static_cast<float>(m[sub]);
      ASSERT_FLOAT_EQ(y[i], want) << (five ? "Q5_K " : "Q4_K ") << i;
    }
  }
}

TEST(BlockQuantsTest, Q6_K) {
  std::mt19937 rng(6);
  std::vector<int> q(256);
  for (int& v : q) v = static_cast<int>(rng() % 64);
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<uint8_t> block(210, 0);
  uint8_t* ql = block.data();
  uint8_t* qh = block.data() + 128;
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = q[128 * n + l], q2 = q[128 * n + l + 32], q3 = q[128 * n + l + 64], q4 = q[128 * n + l + 96];
      ql[64 * n + l] = static_cast<uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
      ql[64 * n + l + 32] = static_cast<uint8_t>((q2 & 0x0F) | ((q4 & 0x0F) << 4));
      qh[32 * n + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
  std::memcpy(block.data() + 192, scales, 16);
  PutHalf(block.data() + 208, 0.25f);
  const std::vector<float> y = Dequantize(DType::kQ6_K, block);
  for (int i = 0; i < 256; ++i) {
    const int n = i / 128, l = i % 32, group = (i % 128) / 32;
    const float scale = static_cast<float>(scales[8 * n + l / 16 + 2 * group]);
    ASSERT_FLOAT_EQ(y[i], 0.25f * scale * static_cast<float>(q[i] - 32)) << i;
  }
}

TEST(BlockQuantsTest, Q8_0RoundTripsWithinHalfAStep) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(32 * 40);
  for (float& v : x) v = normal(rng);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block stays zero
  std::vector<uint8_t> blocks(DTypeBytes(DType::kQ8_0, static_cast<int64_t>(x.size())));
  QuantizeQ8_0(x.data(), static_cast<int64_t>(x.size()), blocks.data());
  std::vector<float> y(x.size());
  DequantizeBlocks(DType::kQ8_0, blocks.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const float step = Fp16ToFloat(FloatToFp16(amax / 127.0f));
    for (int j = 0; j < 32; ++j) {
      // Half a step of rounding, plus the fp16 rounding of the scale times the code.
      EXPECT_LE(std::fabs(y[32 * b + j] - x[32 * b + j]), 0.5f * step + 127.0f * step * 1e-3f) << b << " " << j;
    }
  }
  EXPECT_EQ(y[70], 0.0f);
  // The element accessor of a block tensor agrees with whole-tensor dequantization.
  TensorView view{"t", DType::kQ8_0, {40, 32}, blocks.data()};
  EXPECT_EQ(view.nbytes(), blocks.size());
  EXPECT_EQ(view.ElementAsFloat(77), y[77]);
  std::vector<float> all;
  ToFloat32(view, &all);
  EXPECT_EQ(all, y);
}

}  // namespace
}  // namespace kvtier
