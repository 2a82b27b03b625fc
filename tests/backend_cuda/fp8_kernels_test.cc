// FP8 weight kernels against the CPU reference on identical data: quantization at load
// writes the bytes and scales of model/fp8_weights.h QuantizeRowsFp8, the fp8 decode GEMV
// (plain and fused gate|up + SiLU) matches a double-precision product over the same codes
// and scales, and the prefill dequantization writes the host's 16-bit values bit for bit.
#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/fp8_skinny.h"
#include "common/fp8_e4m3.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model/fp8_weights.h"

namespace kvtier {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::Elem16;
using cuda_test::ForEachElem;

TEST(Fp8KernelsTest, QuantizeRowsWritesTheCpuBytes) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(3);
    const int64_t rows = 37, cols = 1000;
    cuda_test::Data16 w = cuda_test::Random16<T>(rows * cols, rng, -3.0f, 3.0f);
    for (int64_t c = 0; c < cols; ++c) w.bits[5 * cols + c] = Elem16<T>::Bits(0.0f), w.values[5 * cols + c] = 0.0f;
    std::vector<uint8_t> want_codes(rows * cols);
    std::vector<float> want_scales(rows);
    QuantizeRowsFp8(w.values.data(), rows, cols, want_codes.data(), want_scales.data());

    DeviceBuffer<uint16_t> d_w(rows * cols);
    DeviceBuffer<uint8_t> d_codes(rows * cols);
    DeviceBuffer<float> d_scales(rows);
    CUDA_ASSERT(cudaMemcpy(d_w.ptr, w.bits.data(), w.bits.size() * 2, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cuda::QuantizeRowsFp8(reinterpret_cast<const T*>(d_w.ptr), rows, cols, d_codes.ptr, d_scales.ptr,
                                      nullptr));
    std::vector<uint8_t> codes(rows * cols);
    std::vector<float> scales(rows);
    CUDA_ASSERT(cudaMemcpy(codes.data(), d_codes.ptr, codes.size(), cudaMemcpyDeviceToHost));
    CUDA_ASSERT(cudaMemcpy(scales.data(), d_scales.ptr, scales.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(scales, want_scales);
    EXPECT_EQ(codes, want_codes);
  });
}

TEST(Fp8KernelsTest, GemvMatchesTheReferenceOnTheSameCodes) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(9);
    const int64_t out_features = 333, in_features = 4096 + 48;  // pre-wait, pipelined and ragged pieces
    std::vector<uint8_t> codes(out_features * in_features);
    std::uniform_int_distribution<int> code(0, 255);
    for (uint8_t& c : codes) {
      do c = static_cast<uint8_t>(code(rng)); while ((c & 0x7f) == 0x7f);  // no NaN codes
    }
    std::vector<float> scales(out_features);
    std::uniform_real_distribution<float> scale(1e-4f, 1e-2f);
    for (float& s : scales) s = scale(rng);
    EXPECT_EQ(cuda::GemvFp8<T>(nullptr, 9, nullptr, nullptr, 1, 16, nullptr, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cuda::GemvFp8<T>(nullptr, 1, nullptr, nullptr, 1, 24, nullptr, nullptr), cudaErrorInvalidValue);
    cudaGetLastError();
    for (int num_rows : {1, 3, 8}) {
      SCOPED_TRACE(num_rows);
      cuda_test::Data16 x = cuda_test::Random16<T>(num_rows * in_features, rng);
      DeviceBuffer<uint16_t> d_x(x.bits.size()), d_out(num_rows * out_features);
      DeviceBuffer<uint8_t> d_codes(codes.size());
      DeviceBuffer<float> d_scales(scales.size());
      CUDA_ASSERT(cudaMemcpy(d_x.ptr, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(d_codes.ptr, codes.data(), codes.size(), cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(d_scales.ptr, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
      CUDA_ASSERT(cuda::GemvFp8(reinterpret_cast<const T*>(d_x.ptr), num_rows, d_codes.ptr, d_scales.ptr, out_features,
                                in_features, reinterpret_cast<T*>(d_out.ptr), nullptr));
      std::vector<uint16_t> out(num_rows * out_features);
      CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
      // gemv_bulk.cuh's kernel (asked for; by default for one row of codes this small): the bits of
      // the register kernels, one row's (fp8_gemv_rows.cuh) and several rows'.
      CudaLaunchOptions registers, bulk;
      registers.gemv_bulk = 0;
      bulk.gemv_bulk = 1;
      CUDA_ASSERT(cuda::GemvFp8(reinterpret_cast<const T*>(d_x.ptr), num_rows, d_codes.ptr, d_scales.ptr, out_features,
                                in_features, reinterpret_cast<T*>(d_out.ptr), nullptr, bulk));
      CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
      CUDA_ASSERT(cuda::GemvFp8(reinterpret_cast<const T*>(d_x.ptr), num_rows, d_codes.ptr, d_scales.ptr, out_features,
                                in_features, reinterpret_cast<T*>(d_out.ptr), nullptr, registers));
      std::vector<uint16_t> through_registers(out.size());
      CUDA_ASSERT(cudaMemcpy(through_registers.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
      EXPECT_EQ(through_registers, out);
      for (int r = 0; r < num_rows; ++r) {
        for (int64_t n = 0; n < out_features; ++n) {
          double want = 0, magnitude = 0;
          for (int64_t c = 0; c < in_features; ++c) {
            const double term = static_cast<double>(x.values[r * in_features + c]) *
                                Fp8E4M3ToFloat(codes[n * in_features + c]) * scales[n];
            want += term;
            magnitude += std::fabs(term);
          }
          const double got = Elem16<T>::Value(out[r * out_features + n]);
          // Output rounding to T plus fp32 accumulation over in_features terms.
          ASSERT_NEAR(got, want, cuda_test::Tolerance<T>() * std::fabs(want) + 1e-5 * magnitude)
              << r << " " << n;
        }
      }
    }
  });
}

// Both gate activations; |d act(g) / dg| <= 1.13 (GELU-tanh; SiLU 1.1) in the bounds below.
TEST(Fp8KernelsTest, GemvGatedMulMatchesTheReference) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(21);
    const int64_t inter = 197, in_features = 2048 + 2 * 512 + 32;  // pre-wait, pipelined and ragged pieces
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    cuda_test::RandomFp8(2 * inter, in_features, rng, &codes, &scales);
    EXPECT_EQ(cuda::GemvGatedMulFp8<T>(nullptr, 3, nullptr, nullptr, 1, 16, cuda::GateActivation::kSilu, nullptr,
                                       nullptr),
              cudaErrorInvalidValue);
    cudaGetLastError();
    for (cuda::GateActivation act : cuda_test::kGateActivations)
    for (int num_rows : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << num_rows << " rows, gelu " << (act == cuda::GateActivation::kGeluTanh));
      cuda_test::Data16 x = cuda_test::Random16<T>(num_rows * in_features, rng);
      DeviceBuffer<uint16_t> d_x(x.bits.size()), d_out(num_rows * inter);
      DeviceBuffer<uint8_t> d_codes(codes.size());
      DeviceBuffer<float> d_scales(scales.size());
      CUDA_ASSERT(cudaMemcpy(d_x.ptr, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(d_codes.ptr, codes.data(), codes.size(), cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(d_scales.ptr, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
      CUDA_ASSERT(cuda::GemvGatedMulFp8(reinterpret_cast<const T*>(d_x.ptr), num_rows, d_codes.ptr, d_scales.ptr,
                                        inter, in_features, act, reinterpret_cast<T*>(d_out.ptr), nullptr));
      std::vector<uint16_t> out(num_rows * inter);
      CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
      // gemv_bulk.cuh's kernel (asked for; by default for one row of codes this small) and the
      // register kernels give the same bits.
      for (int bulk : {0, 1}) {
        CudaLaunchOptions launch;
        launch.gemv_bulk = bulk;
        CUDA_ASSERT(cuda::GemvGatedMulFp8(reinterpret_cast<const T*>(d_x.ptr), num_rows, d_codes.ptr, d_scales.ptr,
                                          inter, in_features, act, reinterpret_cast<T*>(d_out.ptr), nullptr, launch));
        std::vector<uint16_t> again(out.size());
        CUDA_ASSERT(cudaMemcpy(again.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
        EXPECT_EQ(again, out) << "gemv_bulk " << bulk;
      }
      for (int r = 0; r < num_rows; ++r) {
        for (int64_t n = 0; n < inter; ++n) {
          double dot[2] = {0, 0}, magnitude[2] = {0, 0};
          for (int j = 0; j < 2; ++j) {
            const int64_t row = n + j * inter;
            for (int64_t c = 0; c < in_features; ++c) {
              const double term = static_cast<double>(x.values[r * in_features + c]) *
                                  Fp8E4M3ToFloat(codes[row * in_features + c]) * scales[row];
              dot[j] += term;
              magnitude[j] += std::fabs(term);
            }
          }
          const double want = cuda_test::GateRef(act, dot[0], dot[1]);
          const double got = Elem16<T>::Value(out[r * inter + n]);
          // d(act(g) u) = (act'(g) u) dg + act(g) du, act' <= 1.13, |act(g)| <= |g|.
          const double bound = cuda_test::Tolerance<T>() * std::fabs(want) +
                               1e-5 * (1.13 * std::fabs(dot[1]) * magnitude[0] + std::fabs(dot[0]) * magnitude[1]) + 1e-6;
          ASSERT_NEAR(got, want, bound) << r << " " << n;
        }
      }
    }
  });
}

TEST(Fp8KernelsTest, DequantizeWritesTheHostValues) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(5);
    for (int64_t cols : {int64_t{64}, int64_t{37}}) {  // the 16-code and the scalar kernel
      SCOPED_TRACE(cols);
      const int64_t rows = 53;
      std::vector<uint8_t> codes;
      std::vector<float> scales;
      cuda_test::RandomFp8(rows, cols, rng, &codes, &scales);
      DeviceBuffer<uint8_t> d_codes(codes.size());
      DeviceBuffer<float> d_scales(scales.size());
      DeviceBuffer<uint16_t> d_out(codes.size());
      CUDA_ASSERT(cudaMemcpy(d_codes.ptr, codes.data(), codes.size(), cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(d_scales.ptr, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
      CUDA_ASSERT(cuda::DequantizeRowsFp8(d_codes.ptr, d_scales.ptr, rows, cols, reinterpret_cast<T*>(d_out.ptr),
                                          nullptr));
      std::vector<uint16_t> out(codes.size());
      CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < codes.size(); ++i) {
        ASSERT_EQ(out[i], Elem16<T>::Bits(Fp8E4M3ToFloat(codes[i]) * scales[i / cols])) << i;
      }
    }
  });
}

// The tensor-core projection for 3..64 rows: every row count class (1, 2, 4 and 8 n-tiles,
// partial tiles), a weight row count that is not a multiple of the CTA tile, one split and
// many, and the gate|up + SiLU finish; against double-precision products of the same codes.
TEST(Fp8KernelsTest, SkinnyMatchesTheReference) {
  KVT_SKIP_WITHOUT_CUDA();
  ASSERT_EQ(cuda::SkinnyFp8Init(), cudaSuccess);
  ForEachElem([]<typename T>() {
    std::mt19937 rng(33);
    const int64_t n = 334, k = 64 * 40;
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    cuda_test::RandomFp8(n, k, rng, &codes, &scales);
    DeviceBuffer<uint8_t> d_codes(codes.size());
    DeviceBuffer<float> d_scales(scales.size());
    CUDA_ASSERT(cudaMemcpy(d_codes.ptr, codes.data(), codes.size(), cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(d_scales.ptr, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
    EXPECT_FALSE(cuda::SkinnyFp8Supported(65, k, d_codes.ptr, d_codes.ptr));
    EXPECT_FALSE(cuda::SkinnyFp8Supported(4, 96, d_codes.ptr, d_codes.ptr));
    const int many = cuda::SkinnyFp8Splits(n, k, 132);
    EXPECT_GT(many, 1);
    for (int rows : {3, 9, 17, 40, 64}) {
      for (int splits : {1, many}) {
        for (int epilogue : {0, 1, 2}) {  // the plain projection, SiLU, GELU-tanh
          const bool gated = epilogue > 0;
          const cuda::GateActivation act = epilogue == 2 ? cuda::GateActivation::kGeluTanh : cuda::GateActivation::kSilu;
          SCOPED_TRACE(::testing::Message() << rows << " rows, " << splits << " splits, epilogue " << epilogue);
          cuda_test::Data16 x = cuda_test::Random16<T>(rows * k, rng);
          const int64_t n_out = gated ? n / 2 : n;
          DeviceBuffer<uint16_t> d_x(x.bits.size()), d_out(rows * n_out);
          DeviceBuffer<float> d_partial(cuda::SkinnyFp8PartialFloats(rows, n, splits));
          CUDA_ASSERT(cudaMemcpy(d_x.ptr, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
          CUDA_ASSERT(cuda::SkinnyFp8(reinterpret_cast<const T*>(d_x.ptr), rows, d_codes.ptr, d_scales.ptr, n, k,
                                      splits, d_partial.ptr, gated ? std::optional(act) : std::nullopt,
                                      reinterpret_cast<T*>(d_out.ptr), nullptr));
          std::vector<uint16_t> out(rows * n_out);
          CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
          for (int r = 0; r < rows; ++r) {
            std::vector<double> dot(n, 0.0), magnitude(n, 0.0);
            for (int64_t w = 0; w < n; ++w) {
              for (int64_t c = 0; c < k; ++c) {
                const double term = static_cast<double>(x.values[r * k + c]) * Fp8E4M3ToFloat(codes[w * k + c]) * scales[w];
                dot[w] += term;
                magnitude[w] += std::fabs(term);
              }
            }
            for (int64_t c = 0; c < n_out; ++c) {
              const double got = Elem16<T>::Value(out[r * n_out + c]);
              double want = dot[c], bound = 1e-5 * magnitude[c];
              if (gated) {
                const double g = dot[c], u = dot[n_out + c];
                want = cuda_test::GateRef(act, g, u);
                bound = 1e-5 * (1.13 * std::fabs(u) * magnitude[c] + std::fabs(g) * magnitude[n_out + c]) + 1e-6;
              }
              ASSERT_NEAR(got, want, cuda_test::Tolerance<T>() * std::fabs(want) + bound) << r << " " << c;
            }
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace kvtier
