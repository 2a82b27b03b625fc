// Tests of the quantized products of the fast CPU path: activation quantization
// (quant_activations.h) against ggml's rules written out here, the K types' float order
// against ggml's written out here, every kernel set the processor runs against the portable
// one bit for bit, the dot products against a double sum of the dequantized values, and
// MatMul over a quantized CpuMatrix.
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/dot16.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/quant_activations.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_gemm.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "testing/random_values.h"
#include "model/block_quants.h"
#include "model/tensor.h"

namespace kvtier {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  return testing::RandomNormal(n, rng, scale);
}

void PutHalf(uint8_t* p, float value) {
  const uint16_t bits = FloatToFp16(value);
  p[0] = static_cast<uint8_t>(bits & 0xFF);
  p[1] = static_cast<uint8_t>(bits >> 8);
}

// num_blocks random blocks of a weight type: random quants and scale bytes, small positive
// half scales (where a random half could be infinite or NaN).
std::vector<uint8_t> RandomWeights(DType type, int64_t num_blocks, std::mt19937& rng) {
  const size_t bytes = DTypeBlockBytes(type);
  std::vector<uint8_t> w(bytes * num_blocks);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < num_blocks; ++i) {
    uint8_t* b = w.data() + i * bytes;
    switch (type) {
      case DType::kQ6_K:
        PutHalf(b + 208, scale(rng));
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        PutHalf(b, scale(rng));
        PutHalf(b + 2, scale(rng));
        break;
      default:  // Q8_0, Q4_0
        PutHalf(b, scale(rng));
        break;
    }
  }
  return w;
}

std::vector<uint8_t> Quantize(DType weight_type, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> out(ActivationBlockBytes(weight_type) * (n / ActivationBlockValues(weight_type)));
  if (ActivationBlockValues(weight_type) == kQ8_0Values) {
    QuantizeActivationsQ8_0(x.data(), n, out.data());
  } else {
    QuantizeActivationsQ8K(x.data(), n, reinterpret_cast<BlockQ8K*>(out.data()));
  }
  return out;
}

std::vector<float> DequantizeActivations(DType weight_type, const std::vector<uint8_t>& a, int64_t n) {
  std::vector<float> out(n);
  if (ActivationBlockValues(weight_type) == kQ8_0Values) {
    DequantizeBlocks(DType::kQ8_0, a.data(), n, out.data());
    return out;
  }
  const BlockQ8K* blocks = reinterpret_cast<const BlockQ8K*>(a.data());
  for (int64_t i = 0; i < n; ++i) out[i] = blocks[i / kQ8KValues].d * blocks[i / kQ8KValues].qs[i % kQ8KValues];
  return out;
}

const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

TEST(QuantActivationsTest, Q8_0RoundsHalfToEvenWithScaleOfMaxOver127) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1: every value is its own quant
  x[1] = 2.5f;    // ties round to even
  x[2] = -3.5f;
  x[3] = 0.49f;
  x[4] = -127.0f;
  std::vector<uint8_t> q(kQ8_0Bytes);
  QuantizeActivationsQ8_0(x.data(), 32, q.data());
  EXPECT_EQ(Fp16ToFloat(static_cast<uint16_t>(q[0] | (q[1] << 8))), 1.0f);
  const int8_t* qs = reinterpret_cast<const int8_t*>(q.data() + 2);
  EXPECT_EQ(qs[0], 127);
  EXPECT_EQ(qs[1], 2);
  EXPECT_EQ(qs[2], -4);
  EXPECT_EQ(qs[3], 0);
  EXPECT_EQ(qs[4], -127);
  std::vector<float> zeros(32, 0.0f);
  QuantizeActivationsQ8_0(zeros.data(), 32, q.data());
  for (size_t i = 0; i < kQ8_0Bytes; ++i) EXPECT_EQ(q[i], 0) << i;
}

// The vector quantizer gives the portable bytes, ties, tiny blocks and infinities included,
// and its scales are the blocks' halves widened.
TEST(QuantActivationsTest, Q8_0VectorCodeGivesThePortableBytes) {
  if (!HasQuantizeActivationsQ8_0Avx512()) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(23);
  const int64_t n = 32 * 40;
  std::vector<float> x = Random(n, rng, 3.0f);
  for (int64_t i = 0; i < 32; ++i) x[32 + i] = 0.5f * static_cast<float>(i - 16);  // ties
  for (int64_t i = 0; i < 32; ++i) x[64 + i] = 1e-39f * static_cast<float>(i % 5);  // inverse overflows
  for (int64_t i = 0; i < 32; ++i) x[96 + i] = i % 2 == 0 ? -0.0f : 0.0f;
  x[130] = std::numeric_limits<float>::infinity();
  x[170] = -1e30f;
  std::vector<uint8_t> want(n / 32 * kQ8_0Bytes), got(want.size());
  std::vector<float> scales(n / 32);
  QuantizeActivationsQ8_0Portable(x.data(), n, want.data());
  QuantizeActivationsQ8_0Avx512(x.data(), n, got.data(), scales.data());
  EXPECT_EQ(got, want);
  for (int64_t i = 0; i < n / 32; ++i) {
    const uint8_t* block = want.data() + i * kQ8_0Bytes;
    EXPECT_EQ(scales[i], Fp16ToFloat(static_cast<uint16_t>(block[0] | (block[1] << 8)))) << i;
  }
}

TEST(QuantActivationsTest, Q8KScalesByTheLargestMagnitudeAndSumsSixteens) {
  std::mt19937 rng(7);
  std::vector<float> x = Random(2 * kQ8KValues, rng);
  x[5] = -9.0f;  // the largest magnitude, negative: iscale = -127 / -9, d = 1 / iscale
  BlockQ8K blocks[2];
  QuantizeActivationsQ8K(x.data(), 2 * kQ8KValues, blocks);
  EXPECT_FLOAT_EQ(blocks[0].d, 1.0f / (-127.0f / -9.0f));
  EXPECT_EQ(blocks[0].qs[5], -127);
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < kQ8KValues; ++j) {
      const float v = x[b * kQ8KValues + j];
      EXPECT_LE(std::fabs(blocks[b].d * blocks[b].qs[j] - v), std::fabs(blocks[b].d) * 0.5f + 1e-6f) << b << " " << j;
    }
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blocks[b].qs[16 * s + l];
      EXPECT_EQ(blocks[b].bsums[s], sum);
    }
  }
  std::vector<float> zeros(kQ8KValues, 0.0f);
  QuantizeActivationsQ8K(zeros.data(), kQ8KValues, blocks);
  EXPECT_EQ(blocks[0].d, 0.0f);
  EXPECT_EQ(blocks[0].bsums[0], 0);
}

TEST(QuantDotTest, MatchesDoubleSumOfDequantizedValues) {
  std::mt19937 rng(3);
  for (DType type : kTypes) {
    const int64_t n = 1024;
    const int64_t num_blocks = n / DTypeBlockElements(type);
    const std::vector<uint8_t> w = RandomWeights(type, num_blocks, rng);
    const std::vector<uint8_t> a = Quantize(type, Random(n, rng));
    std::vector<float> wf(n);
    DequantizeBlocks(type, w.data(), n, wf.data());
    const std::vector<float> af = DequantizeActivations(type, a, n);
    double exact = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += double{wf[i]} * af[i];
      magnitude += std::fabs(double{wf[i]} * af[i]);
    }
    const float got = PortableQuantDot().For(type)(w.data(), a.data(), num_blocks);
    EXPECT_NEAR(got, exact, 1e-5 * magnitude + 1e-6) << DTypeName(type);
  }
}

// Value p of a Q4_K or Q5_K super-block (unsigned, before scale and min), read from the
// layout position by position.
int K45Value(const uint8_t* block, bool q5, int p) {
  const uint8_t byte = block[(q5 ? 48 : 16) + 32 * (p / 64) + p % 32];
  const int low = p % 64 < 32 ? byte & 0x0F : byte >> 4;
  return q5 && ((block[16 + p % 32] >> (p / 32)) & 1) ? low + 16 : low;
}

// Value p of a Q6_K super-block, unsigned (the -32 not taken off).
int Q6Value(const uint8_t* block, int p) {
  const int n = p / 128, k = p % 128 / 32, i = p % 32;
  const uint8_t low = block[64 * n + 32 * (k & 1) + i];
  return (k < 2 ? low & 0x0F : low >> 4) | (((block[128 + 32 * n + i] >> (2 * k)) & 3) << 4);
}

// llama.cpp's float order for the K types on x86 (quant_dot.h), written out from ggml's
// kernels a position at a time: Q4_K as its repacked GEMM sums pairs of sub-blocks, Q5_K and
// Q6_K in the eight lanes of its AVX2 dot products.
float GgmlKDot(DType type, const uint8_t* w, const uint8_t* a, int64_t num_blocks) {
  float acc = 0.0f, acc_min = 0.0f, lanes_acc[8] = {};
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* block = w + b * DTypeBlockBytes(type);
    const BlockQ8K& y = reinterpret_cast<const BlockQ8K*>(a)[b];
    int64_t lanes[8] = {}, mins_total = 0;
    if (type == DType::kQ6_K) {
      const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
      for (int p = 0; p < 256; ++p) lanes[p % 32 / 4] += scales[p / 16] * Q6Value(block, p) * y.qs[p];
      for (int l = 0; l < 8; ++l) {
        lanes[l] -= 32 * (y.bsums[2 * l] * scales[2 * l] + y.bsums[2 * l + 1] * scales[2 * l + 1]);
      }
      const float d = y.d * Fp16ToFloat(static_cast<uint16_t>(block[208] | (block[209] << 8)));
      for (int l = 0; l < 8; ++l) lanes_acc[l] = std::fmaf(d, static_cast<float>(lanes[l]), lanes_acc[l]);
      continue;
    }
    const bool q5 = type == DType::kQ5_K;
    const float d_w = Fp16ToFloat(static_cast<uint16_t>(block[0] | (block[1] << 8)));
    const float dmin_w = Fp16ToFloat(static_cast<uint16_t>(block[2] | (block[3] << 8)));
    for (int pair = 0; pair < 4; ++pair) {
      int64_t total = 0, mins = 0;
      for (int p = 64 * pair; p < 64 * pair + 64; ++p) {
        int scale, min;
        KQuantScaleMin(block + 4, p / 32, &scale, &min);
        total += scale * K45Value(block, q5, p) * y.qs[p];
        lanes[p % 32 / 4] += scale * K45Value(block, q5, p) * y.qs[p];
        mins += min * y.qs[p];
      }
      mins_total += mins;
      if (!q5) {
        acc = std::fmaf(static_cast<float>(total), d_w * y.d, acc);
        acc_min = std::fmaf(static_cast<float>(mins), dmin_w * y.d, acc_min);
      }
    }
    if (q5) {
      for (int l = 0; l < 8; ++l) lanes_acc[l] = std::fmaf(y.d * d_w, static_cast<float>(lanes[l]), lanes_acc[l]);
      acc_min = std::fmaf(-(y.d * dmin_w), static_cast<float>(mins_total), acc_min);
    }
  }
  if (type == DType::kQ4_K) return acc - acc_min;
  float folded = ((lanes_acc[0] + lanes_acc[4]) + (lanes_acc[2] + lanes_acc[6])) +
                 ((lanes_acc[1] + lanes_acc[5]) + (lanes_acc[3] + lanes_acc[7]));
  return type == DType::kQ5_K ? folded + acc_min : folded;
}

TEST(QuantDotTest, KTypesFollowLlamaCppsFloatOrder) {
  std::mt19937 rng(29);
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int64_t num_blocks : {1, 3, 8}) {
      for (int trial = 0; trial < 20; ++trial) {
        const std::vector<uint8_t> w = RandomWeights(type, num_blocks, rng);
        const std::vector<uint8_t> a = Quantize(type, Random(num_blocks * 256, rng, trial % 2 == 0 ? 1.0f : 50.0f));
        const float want = GgmlKDot(type, w.data(), a.data(), num_blocks);
        const float got = PortableQuantDot().For(type)(w.data(), a.data(), num_blocks);
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << DTypeName(type) << " blocks " << num_blocks << ": " << got << " vs " << want;
      }
    }
  }
}

TEST(QuantDotTest, EveryInstructionSetGivesThePortableBits) {
  std::mt19937 rng(5);
  const std::vector<const QuantDotKernels*> sets = SupportedQuantDots();
  std::printf("kernel sets on this processor:");
  for (const QuantDotKernels* set : sets) std::printf(" %.*s", static_cast<int>(set->isa.size()), set->isa.data());
  std::printf(" (best: %.*s)\n", static_cast<int>(BestQuantDot().isa.size()), BestQuantDot().isa.data());
  for (DType type : kTypes) {
    for (int64_t num_blocks : {1, 3, 8, 17}) {
      const int64_t n = num_blocks * DTypeBlockElements(type);
      for (int trial = 0; trial < 20; ++trial) {
        const std::vector<uint8_t> w = RandomWeights(type, num_blocks, rng);
        // Activations with large outliers, and a zero block: the quantizer's edge cases.
        std::vector<float> x = Random(n, rng, trial % 2 == 0 ? 1.0f : 50.0f);
        if (trial == 3) std::fill(x.begin(), x.begin() + DTypeBlockElements(type), 0.0f);
        const std::vector<uint8_t> a = Quantize(type, x);
        const float want = PortableQuantDot().For(type)(w.data(), a.data(), num_blocks);
        for (const QuantDotKernels* set : sets) {
          const float got = set->For(type)(w.data(), a.data(), num_blocks);
          uint32_t want_bits, got_bits;
          std::memcpy(&want_bits, &want, 4);
          std::memcpy(&got_bits, &got, 4);
          EXPECT_EQ(got_bits, want_bits) << set->isa << " " << DTypeName(type) << " blocks " << num_blocks
                                         << ": " << got << " vs " << want;
        }
      }
    }
  }
}

TEST(QuantDotTest, FourRowKernelGivesEachRowTheSingleRowBits) {
  std::mt19937 rng(17);
  for (const QuantDotKernels* set : SupportedQuantDots()) {
    for (int64_t num_blocks : {1, 5, 64}) {
      const int64_t n = num_blocks * 32;
      const std::vector<uint8_t> w = RandomWeights(DType::kQ8_0, num_blocks, rng);
      std::vector<uint8_t> a;
      for (int r = 0; r < 4; ++r) {
        const std::vector<uint8_t> row = Quantize(DType::kQ8_0, Random(n, rng, 1.0f + 10.0f * r));
        a.insert(a.end(), row.begin(), row.end());
      }
      const size_t stride = a.size() / 4;
      std::vector<float> scales(4 * num_blocks);
      for (int64_t i = 0; i < 4 * num_blocks; ++i) {
        const uint8_t* block = a.data() + (i / num_blocks) * stride + (i % num_blocks) * kQ8_0Bytes;
        scales[i] = Fp16ToFloat(static_cast<uint16_t>(block[0] | (block[1] << 8)));
      }
      float out[4];
      set->q8_0_x4(w.data(), a.data(), stride, scales.data(), num_blocks, num_blocks, out);
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(out[r], PortableQuantDot().q8_0(w.data(), a.data() + r * stride, num_blocks)) << set->isa << " " << r;
      }
    }
  }
}

TEST(QuantDotTest, Q8_0WeightsOfMinus128StayExact) {
  // A file may hold -128 (ggml's quantizer never writes it); the byte products must not saturate.
  std::vector<uint8_t> w(34, 0x80);
  PutHalf(w.data(), 1.0f);
  std::vector<float> x(32, 127.0f);
  const std::vector<uint8_t> a = Quantize(DType::kQ8_0, x);
  for (const QuantDotKernels* set : SupportedQuantDots()) {
    EXPECT_EQ(set->For(DType::kQ8_0)(w.data(), a.data(), 1), -128.0f * 127.0f * 32.0f) << set->isa;
  }
}

TEST(CpuMatrixTest, QuantizedMatMulIsTheRowDotsAndIndependentOfThreads) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  for (DType type : kTypes) {
    CpuMatrix w;
    w.dtype = type;
    w.rows = 37;
    w.cols = 512;
    const int64_t blocks_per_row = w.cols / DTypeBlockElements(type);
    w.packed = RandomWeights(type, w.rows * blocks_per_row, rng);
    const int64_t rows = 5;
    const std::vector<float> x = Random(rows * w.cols, rng);
    const std::vector<float> bias = Random(w.rows, rng);
    std::vector<float> out(rows * w.rows), out_inline(rows * w.rows);
    std::vector<uint8_t> scratch;
    MatMul(w, x.data(), bias.data(), rows, out.data(), &pool, &scratch);
    MatMul(w, x.data(), bias.data(), rows, out_inline.data(), nullptr, &scratch);
    EXPECT_EQ(out, out_inline) << DTypeName(type);
    for (int64_t t = 0; t < rows; ++t) {
      const std::vector<float> row(x.begin() + t * w.cols, x.begin() + (t + 1) * w.cols);
      const std::vector<uint8_t> a = Quantize(type, row);
      for (int64_t n = 0; n < w.rows; ++n) {
        const float dot = BestQuantDot().For(type)(w.packed.data() + n * w.RowBytes(), a.data(), blocks_per_row);
        ASSERT_EQ(out[t * w.rows + n], dot + bias[n]) << DTypeName(type) << " " << t << " " << n;
      }
    }
  }
}

// Many activation rows (prefill) take the Q8_0 kernel of quant_gemm.h where the processor has
// it: every output must still be the row dot's bits plus the bias, including weights of
// -128, a short last group of weight rows and activation rows past a multiple of the tile.
TEST(CpuMatrixTest, ManyRowQ8_0MatMulIsTheRowDots) {
  std::printf("Q8_0 many-row kernel: %s\n", HasQ8_0Gemm() ? "avx512vnni" : "none (row dots)");
  std::mt19937 rng(19);
  ThreadPool pool(2);
  for (const int64_t cols : {32, 256, 768}) {
    CpuMatrix w;
    w.dtype = DType::kQ8_0;
    w.rows = 45;
    w.cols = cols;
    const int64_t blocks_per_row = w.cols / 32;
    w.packed = RandomWeights(DType::kQ8_0, w.rows * blocks_per_row, rng);
    for (size_t i = 7; i < w.packed.size(); i += 97) {
      if (i % kQ8_0Bytes >= 2) w.packed[i] = 0x80;
    }
    for (const int64_t rows : {12, 13, 31}) {
      const std::vector<float> x = Random(rows * w.cols, rng);
      const std::vector<float> bias = Random(w.rows, rng);
      for (const bool with_bias : {false, true}) {
        std::vector<float> out(rows * w.rows);
        std::vector<uint8_t> scratch;
        MatMul(w, x.data(), with_bias ? bias.data() : nullptr, rows, out.data(), &pool, &scratch);
        for (int64_t t = 0; t < rows; ++t) {
          const std::vector<float> row(x.begin() + t * w.cols, x.begin() + (t + 1) * w.cols);
          const std::vector<uint8_t> a = Quantize(DType::kQ8_0, row);
          for (int64_t n = 0; n < w.rows; ++n) {
            const float dot = PortableQuantDot().q8_0(w.packed.data() + n * w.RowBytes(), a.data(), blocks_per_row);
            ASSERT_EQ(out[t * w.rows + n], with_bias ? dot + bias[n] : dot)
                << "cols " << cols << " rows " << rows << " at " << t << "," << n;
          }
        }
      }
    }
  }
}

TEST(CpuMatrixTest, SixteenBitMatricesGiveTheReferenceBits) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  for (DType type : {DType::kF16, DType::kBF16}) {
    CpuMatrix w;
    w.dtype = type;
    w.dot16 = &BestExactDot16();  // the default BF16 kernel may round activations (dot16.h)
    w.rows = 45;
    w.cols = 203;  // not a multiple of any vector width
    std::vector<float> widened = Random(w.rows * w.cols, rng);
    w.packed.resize(w.rows * w.RowBytes());
    uint16_t* bits = reinterpret_cast<uint16_t*>(w.packed.data());
    for (size_t i = 0; i < widened.size(); ++i) {
      bits[i] = type == DType::kF16 ? FloatToFp16(widened[i]) : FloatToBf16(widened[i]);
      widened[i] = type == DType::kF16 ? Fp16ToFloat(bits[i]) : Bf16ToFloat(bits[i]);
    }
    const int64_t rows = 6;
    const std::vector<float> x = Random(rows * w.cols, rng), bias = Random(w.rows, rng);
    std::vector<float> out(rows * w.rows), want(rows * w.rows);
    std::vector<uint8_t> scratch;
    MatMul(w, x.data(), bias.data(), rows, out.data(), &pool, &scratch);
    MatMulTransposed(x.data(), widened.data(), bias.data(), rows, w.cols, w.rows, want.data(), nullptr);
    EXPECT_EQ(out, want) << DTypeName(type);
  }
}

}  // namespace
}  // namespace kvtier
