// The W8A8 projection path of fp8 prefill steps against the CPU on the same data: RMSNorm and
// SiLU-mul with per-token E4M3 output (fp8_activations.h) write, row by row, the scale
// max |value| / 448 and codes within one E4M3 rounding of value / scale (the device's fp32
// norm may round differently from the host's in the last bit); the fp8 x fp8 cuBLASLt
// projection (fp8_gemm.h) matches a double-precision product of the same codes and scales.
// Skips without a GPU.
#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/fp8_activations.h"
#include "backend/cuda/fp8_gemm.h"
#include "common/fp8_e4m3.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::Elem16;
using cuda_test::ForEachElem;

template <typename T>
void Upload(const std::vector<T>& host, DeviceBuffer<T>* device) {
  ASSERT_EQ(cudaMemcpy(device->ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

template <typename T>
std::vector<T> Download(const DeviceBuffer<T>& device, size_t count) {
  std::vector<T> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), device.ptr, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// Each row of `want` (rows, dim) against the device's codes and scales: the scale is the
// row's max |value| / 448 up to fp32 rounding, and each code decodes to value within half
// an E4M3 step (1/16 relative for normal codes, 2^-10 of the scale for subnormal ones) plus
// the rounding the device's fp32 arithmetic may add.
void ExpectQuantizedRows(const std::vector<double>& want, int rows, int dim, const std::vector<uint8_t>& codes,
                         const std::vector<float>& scales) {
  for (int r = 0; r < rows; ++r) {
    double amax = 0;
    for (int i = 0; i < dim; ++i) amax = std::max(amax, std::fabs(want[static_cast<size_t>(r) * dim + i]));
    const double scale = amax > 0 ? amax / kFp8E4M3Max : 1.0;
    ASSERT_NEAR(scales[r], scale, 1e-5 * scale) << "row " << r;
    for (int i = 0; i < dim; ++i) {
      const size_t at = static_cast<size_t>(r) * dim + i;
      const double got = static_cast<double>(Fp8E4M3ToFloat(codes[at])) * scales[r];
      ASSERT_NEAR(got, want[at], std::fabs(want[at]) / 16 * 1.001 + scale * std::ldexp(1.0, -10) + 1e-6 * amax)
          << "row " << r << " column " << i;
    }
  }
}

// Widths that take the register-resident kernels (a multiple of 8, at most 4 chunks of 8 per
// thread) and widths that take the two-pass ones.
TEST(Fp8ActivationsTest, AddRmsNormFp8QuantizesTheNormalizedRows) {
  KVT_SKIP_WITHOUT_CUDA();
  for (const int dim : {4096 + 24, 1000, 4100}) {
  SCOPED_TRACE(dim);
  ForEachElem([dim]<typename T>() {
    std::mt19937 rng(5);
    const int rows = 19;
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> residual(static_cast<size_t>(rows) * dim), weight(dim);
    for (float& v : residual) v = dist(rng);
    for (float& v : weight) v = 1.0f + 0.1f * dist(rng);
    cuda_test::Data16 add = cuda_test::Random16<T>(residual.size(), rng);
    for (int i = 0; i < dim; ++i) residual[3 * dim + i] = 0, add.bits[3 * dim + i] = 0, add.values[3 * dim + i] = 0;
    const float eps = 1e-5f;
    std::vector<double> want(residual.size());
    std::vector<float> want_residual(residual.size());
    for (int r = 0; r < rows; ++r) {
      double sum_sq = 0;
      for (int i = 0; i < dim; ++i) {
        const size_t at = static_cast<size_t>(r) * dim + i;
        want_residual[at] = residual[at] + add.values[at];
        sum_sq += static_cast<double>(want_residual[at]) * want_residual[at];
      }
      const double inv_rms = 1.0 / std::sqrt(sum_sq / dim + eps);
      for (int i = 0; i < dim; ++i) {
        const size_t at = static_cast<size_t>(r) * dim + i;
        want[at] = weight[i] * (want_residual[at] * inv_rms);
      }
    }
    DeviceBuffer<float> d_residual(residual.size()), d_weight(dim), d_scales(rows);
    DeviceBuffer<uint16_t> d_add(add.bits.size());
    DeviceBuffer<uint8_t> d_codes(residual.size());
    Upload(residual, &d_residual);
    Upload(weight, &d_weight);
    Upload(add.bits, &d_add);
    CUDA_ASSERT(cuda::AddRmsNormFp8(d_residual.ptr, reinterpret_cast<const T*>(d_add.ptr), d_weight.ptr, rows, dim,
                                    eps, d_codes.ptr, d_scales.ptr, nullptr, cuda_test::kDefaultLaunch));
    CUDA_ASSERT(cudaDeviceSynchronize());
    EXPECT_EQ(Download(d_residual, residual.size()), want_residual);
    ExpectQuantizedRows(want, rows, dim, Download(d_codes, residual.size()), Download(d_scales, rows));
  });
  }
}

TEST(Fp8ActivationsTest, GatedMulFp8QuantizesTheProducts) {
  KVT_SKIP_WITHOUT_CUDA();
  for (const cuda::GateActivation act : cuda_test::kGateActivations)
  for (const int dim : {14336 + 8, 2048, 20000, 1001}) {
  SCOPED_TRACE(::testing::Message() << dim << " gelu " << (act == cuda::GateActivation::kGeluTanh));
  ForEachElem([dim, act]<typename T>() {
    std::mt19937 rng(7);
    const int rows = 13;
    cuda_test::Data16 gate_up = cuda_test::Random16<T>(static_cast<size_t>(rows) * 2 * dim, rng, -4.0f, 4.0f);
    std::vector<double> want(static_cast<size_t>(rows) * dim);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < dim; ++i) {
        const double g = gate_up.values[static_cast<size_t>(r) * 2 * dim + i];
        const double u = gate_up.values[static_cast<size_t>(r) * 2 * dim + dim + i];
        want[static_cast<size_t>(r) * dim + i] = cuda_test::GateRef(act, g, u);
      }
    }
    DeviceBuffer<uint16_t> d_gate_up(gate_up.bits.size());
    DeviceBuffer<uint8_t> d_codes(want.size());
    DeviceBuffer<float> d_scales(rows);
    Upload(gate_up.bits, &d_gate_up);
    CUDA_ASSERT(cuda::GatedMulFp8(reinterpret_cast<const T*>(d_gate_up.ptr), rows, dim, act, d_codes.ptr,
                                  d_scales.ptr, nullptr, cuda_test::kDefaultLaunch));
    CUDA_ASSERT(cudaDeviceSynchronize());
    ExpectQuantizedRows(want, rows, dim, Download(d_codes, want.size()), Download(d_scales, rows));
  });
  }
}

TEST(Fp8ActivationsTest, QuantizeActivationsFp8QuantizesTheRows) {
  KVT_SKIP_WITHOUT_CUDA();
  for (const int dim : {4096, 520, 4100}) {
    SCOPED_TRACE(dim);
    ForEachElem([dim]<typename T>() {
      std::mt19937 rng(13);
      const int rows = 11;
      cuda_test::Data16 x = cuda_test::Random16<T>(static_cast<size_t>(rows) * dim, rng, -3.0f, 3.0f);
      for (int i = 0; i < dim; ++i) x.bits[2 * dim + i] = 0, x.values[2 * dim + i] = 0;  // a zero row: scale 1
      std::vector<double> want(x.values.begin(), x.values.end());
      DeviceBuffer<uint16_t> d_x(x.bits.size());
      DeviceBuffer<uint8_t> d_codes(want.size());
      DeviceBuffer<float> d_scales(rows);
      Upload(x.bits, &d_x);
      CUDA_ASSERT(cuda::QuantizeActivationsFp8(reinterpret_cast<const T*>(d_x.ptr), rows, dim, d_codes.ptr,
                                               d_scales.ptr, nullptr, cuda_test::kDefaultLaunch));
      CUDA_ASSERT(cudaDeviceSynchronize());
      ExpectQuantizedRows(want, rows, dim, Download(d_codes, want.size()), Download(d_scales, rows));
    });
  }
}

// The device's codes are the host rule's bit for bit (common/fp8_e4m3.h, the weights' and the
// CPU backend's): scale = amax / 448 and e4m3(x / scale), both divisions correctly rounded, over
// values whose quotients reach the normal and subnormal codes, ties and saturation.
TEST(Fp8ActivationsTest, QuantizeActivationsFp8GivesTheHostRulesCodes) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(17);
    const int rows = 9, dim = 4096;
    std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
    std::uniform_int_distribution<int> exponent(-24, 3);
    std::vector<uint16_t> bits(static_cast<size_t>(rows) * dim);
    std::vector<float> values(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      const float v = (i % 2 ? -1.0f : 1.0f) * std::ldexp(mantissa(rng), exponent(rng));
      bits[i] = cuda_test::Elem16<T>::Bits(v);
      values[i] = cuda_test::Elem16<T>::Value(bits[i]);
    }
    DeviceBuffer<uint16_t> d_x(bits.size());
    DeviceBuffer<uint8_t> d_codes(bits.size());
    DeviceBuffer<float> d_scales(rows);
    Upload(bits, &d_x);
    CUDA_ASSERT(cuda::QuantizeActivationsFp8(reinterpret_cast<const T*>(d_x.ptr), rows, dim, d_codes.ptr,
                                             d_scales.ptr, nullptr, cuda_test::kDefaultLaunch));
    CUDA_ASSERT(cudaDeviceSynchronize());
    const std::vector<uint8_t> codes = Download(d_codes, bits.size());
    const std::vector<float> scales = Download(d_scales, rows);
    int subnormal = 0;
    for (int r = 0; r < rows; ++r) {
      float amax = 0.0f;
      for (int i = 0; i < dim; ++i) amax = std::max(amax, std::fabs(values[static_cast<size_t>(r) * dim + i]));
      const float scale = amax / kFp8E4M3Max;
      ASSERT_EQ(scales[r], scale) << "row " << r;
      for (int i = 0; i < dim; ++i) {
        const size_t at = static_cast<size_t>(r) * dim + i;
        ASSERT_EQ(codes[at], FloatToFp8E4M3(values[at] / scale)) << "row " << r << " column " << i << " value "
                                                                  << values[at];
        subnormal += (codes[at] & 0x78) == 0;
      }
    }
    EXPECT_GT(subnormal, 100);  // the data reaches the subnormal codes
  });
}

// A row spread over a cluster of 2, 4 or 8 CTAs gives the one-CTA kernel's codes and scales
// byte for byte (the row's largest magnitude is exact in any order); a spread too narrow for
// the row is refused.
TEST(Fp8ActivationsTest, GatedMulFp8SpreadsGiveTheOneCtaBytes) {
  KVT_SKIP_WITHOUT_CUDA();
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "thread block clusters need sm_90";
  using T = cuda::bf16;
  for (const cuda::GateActivation act : cuda_test::kGateActivations)
  for (const int dim : {14336, 2048, 4104, 20000}) {
  for (const int rows : {1, 3, 70}) {
    SCOPED_TRACE(::testing::Message() << dim << " wide, " << rows << " rows, gelu "
                                      << (act == cuda::GateActivation::kGeluTanh));
    std::mt19937 rng(dim + rows);
    cuda_test::Data16 gate_up = cuda_test::Random16<T>(static_cast<size_t>(rows) * 2 * dim, rng, -4.0f, 4.0f);
    DeviceBuffer<uint16_t> d_gate_up(gate_up.bits.size());
    DeviceBuffer<uint8_t> d_codes(static_cast<size_t>(rows) * dim);
    DeviceBuffer<float> d_scales(rows);
    Upload(gate_up.bits, &d_gate_up);
    const T* x = reinterpret_cast<const T*>(d_gate_up.ptr);
    CUDA_ASSERT(cuda::GatedMulFp8Spread(x, rows, dim, act, 1, d_codes.ptr, d_scales.ptr, nullptr,
                                        cuda_test::kDefaultLaunch));
    const std::vector<uint8_t> want_codes = Download(d_codes, static_cast<size_t>(rows) * dim);
    const std::vector<float> want_scales = Download(d_scales, rows);
    for (const int ctas : {2, 4, 8, 0}) {
      SCOPED_TRACE(ctas);
      ASSERT_EQ(cudaMemset(d_codes.ptr, 0, static_cast<size_t>(rows) * dim), cudaSuccess);
      ASSERT_EQ(cudaMemset(d_scales.ptr, 0, rows * sizeof(float)), cudaSuccess);
      const cudaError_t err = cuda::GatedMulFp8Spread(x, rows, dim, act, ctas, d_codes.ptr, d_scales.ptr, nullptr,
                                                      cuda_test::kDefaultLaunch);
      if (ctas != 0 && dim / 8 > ctas * 1024) {
        EXPECT_EQ(err, cudaErrorInvalidValue);
        continue;
      }
      CUDA_ASSERT(err);
      EXPECT_EQ(Download(d_codes, static_cast<size_t>(rows) * dim), want_codes);
      EXPECT_EQ(Download(d_scales, rows), want_scales);
    }
  }
  }
}

// bf16 output, the one the backend asks for (it runs W8A8 with bf16 compute only).
TEST(Fp8ActivationsTest, Fp8GemmMatchesTheProductOfTheSameCodes) {
  KVT_SKIP_WITHOUT_CUDA();
  DeviceBuffer<uint8_t> workspace(32 << 20);
  auto gemm = cuda::Fp8Gemm::Create(workspace.ptr, 32 << 20);
  if (!gemm.ok()) GTEST_SKIP() << gemm.status();
  {
    using T = cuda::bf16;
    std::mt19937 rng(11);
    for (auto [rows, k, n] : {std::tuple{160, 512, 272}, std::tuple{513, 1024, 96}}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << k << " x " << n);
      std::vector<uint8_t> x8, w8;
      std::vector<float> sx, sw;
      cuda_test::RandomFp8(rows, k, rng, &x8, &sx);
      cuda_test::RandomFp8(n, k, rng, &w8, &sw);
      DeviceBuffer<uint8_t> d_x8(x8.size()), d_w8(w8.size());
      DeviceBuffer<float> d_sx(rows), d_sw(n);
      DeviceBuffer<uint16_t> d_out(static_cast<size_t>(rows) * n);
      Upload(x8, &d_x8);
      Upload(w8, &d_w8);
      Upload(sx, &d_sx);
      Upload(sw, &d_sw);
      const cudaDataType_t type = CUDA_R_16BF;
      ASSERT_TRUE((*gemm)->Run(d_x8.ptr, d_sx.ptr, d_w8.ptr, d_sw.ptr, rows, k, n, d_out.ptr, type, nullptr).ok());
      CUDA_ASSERT(cudaDeviceSynchronize());
      const std::vector<uint16_t> out = Download(d_out, static_cast<size_t>(rows) * n);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < n; ++c) {
          double want = 0, magnitude = 0;
          for (int i = 0; i < k; ++i) {
            const double term = static_cast<double>(Fp8E4M3ToFloat(x8[static_cast<size_t>(r) * k + i])) * sx[r] *
                                Fp8E4M3ToFloat(w8[static_cast<size_t>(c) * k + i]) * sw[c];
            want += term;
            magnitude += std::fabs(term);
          }
          const double got = Elem16<T>::Value(out[static_cast<size_t>(r) * n + c]);
          // Output rounding to T plus the tensor cores' fp8 accumulation, which keeps about 14
          // bits (1.1e-4 of the terms' magnitude seen on the H200); a wrong scale or layout is
          // off by the value itself.
          ASSERT_NEAR(got, want, cuda_test::Tolerance<T>() * std::fabs(want) + 1e-3 * magnitude) << r << " " << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvtier
