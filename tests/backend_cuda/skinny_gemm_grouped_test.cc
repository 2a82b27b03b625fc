// SkinnyGemmGrouped / SkinnyGemmGroupedFp8 (backend/cuda/skinny_gemm.h): a mixture-of-experts
// layer's products in one launch, each problem's rows against double-precision products with
// its own expert's matrix; rows no problem names are left as they were. Problems of one row to
// the full token tile and past it (several problems of one expert), experts with no problem,
// both cp.async pipelines (kTma runs as kOverlapped), many and few CTAs; the refusals. Skips
// without a compute capability 9.0 GPU (the kernels are sm_90a code).
#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/skinny_gemm.h"
#include "common/fp8_e4m3.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "skinny_test_skip.h"

namespace kvtier {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::Elem16;

constexpr uint16_t kUntouched = 0x7fc1;  // a bf16 NaN no product writes

struct Problem {
  int expert, first, rows;
};

// Problems over `experts` experts: rows in order, a gap of unnamed rows between some, one
// expert with none, one with more rows than a token tile holds (split in two problems).
std::vector<Problem> MakeProblems(int experts, int max_rows, std::mt19937& rng, int* total_rows) {
  std::vector<Problem> problems;
  int row = 0;
  for (int e = 0; e < experts; ++e) {
    if (e == 1) continue;  // no routes
    const int want = e == 2 ? max_rows + 5 : 1 + static_cast<int>(rng() % max_rows);
    for (int left = want; left > 0;) {
      const int rows = left < max_rows ? left : max_rows;
      problems.push_back({e, row, rows});
      row += rows;
      left -= rows;
    }
    if (e % 3 == 0) row += 3;  // rows no problem names
  }
  *total_rows = row;
  return problems;
}

TEST(SkinnyGemmGroupedTest, EachProblemMatchesItsExpertsProducts) {
  KVT_SKIP_WITHOUT_SM90();
  ASSERT_EQ(cuda::SkinnyGemmInit(), cudaSuccess);
  std::mt19937 rng(29);
  constexpr int kExperts = 6;
  struct Shape {
    int64_t n, k;
  };
  DeviceBuffer<uint8_t> workspace(cuda::SkinnyGemmWorkspaceBytes(128, 132));
  CUDA_ASSERT(cudaMemset(workspace.ptr, 0, cuda::SkinnyGemmWorkspaceBytes(128, 132)));
  for (const Shape shape : {Shape{264, 512}, Shape{136, 768}}) {
    const int64_t n = shape.n, k = shape.k;
    cuda_test::Data16 w = cuda_test::Random16<cuda::bf16>(kExperts * n * k, rng);
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    cuda_test::RandomFp8(kExperts * n, k, rng, &codes, &scales, 1e-3f, 1e-1f);
    std::vector<float> code_values(codes.size());
    for (size_t i = 0; i < codes.size(); ++i) code_values[i] = Fp8E4M3ToFloat(codes[i]);
    DeviceBuffer<uint16_t> d_w(w.bits.size());
    DeviceBuffer<uint8_t> d_codes(codes.size());
    DeviceBuffer<float> d_scales(scales.size());
    CUDA_ASSERT(cudaMemcpy(d_w.ptr, w.bits.data(), w.bits.size() * 2, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(d_codes.ptr, codes.data(), codes.size(), cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(d_scales.ptr, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
    for (int max_rows : {1, 16, 40, 64, 128}) {
      int total = 0;
      const std::vector<Problem> problems = MakeProblems(kExperts, max_rows, rng, &total);
      std::vector<int4> host_problems;
      for (const Problem& q : problems) host_problems.push_back(make_int4(q.expert, q.first, q.rows, 0));
      DeviceBuffer<int4> d_problems(host_problems.size());
      CUDA_ASSERT(cudaMemcpy(d_problems.ptr, host_problems.data(), host_problems.size() * sizeof(int4),
                             cudaMemcpyHostToDevice));
      cuda_test::Data16 x = cuda_test::Random16<cuda::bf16>(static_cast<size_t>(total) * k, rng);
      DeviceBuffer<uint16_t> d_x(x.bits.size()), d_out(static_cast<size_t>(total) * n);
      CUDA_ASSERT(cudaMemcpy(d_x.ptr, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
      const auto* xp = reinterpret_cast<const cuda::bf16*>(d_x.ptr);
      for (bool fp8 : {false, true}) {
        // Each named row's products with its problem's expert, in double, and their magnitudes.
        std::vector<double> want(static_cast<size_t>(total) * n, std::nan("")), magnitude(want.size(), 0.0);
        for (const Problem& q : problems) {
          for (int r = q.first; r < q.first + q.rows; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              const int64_t wrow = q.expert * n + c;
              const std::vector<float>& weights = fp8 ? code_values : w.values;
              double dot = 0.0, mag = 0.0;
              for (int64_t i = 0; i < k; ++i) {
                const double term = static_cast<double>(x.values[r * k + i]) * weights[wrow * k + i];
                dot += term;
                mag += std::fabs(term);
              }
              const double s = fp8 ? scales[wrow] : 1.0;
              want[r * n + c] = dot * s;
              magnitude[r * n + c] = mag * s;
            }
          }
        }
        for (int sms : {132, 7}) {
          for (auto pipeline : {cuda::SkinnyPipeline::kSerial, cuda::SkinnyPipeline::kOverlapped,
                                cuda::SkinnyPipeline::kTma}) {
            SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " max_rows " << max_rows << " fp8 " << fp8
                                              << " sms " << sms << " pipeline " << static_cast<int>(pipeline));
            std::vector<uint16_t> out(static_cast<size_t>(total) * n, kUntouched);
            CUDA_ASSERT(cudaMemcpy(d_out.ptr, out.data(), out.size() * 2, cudaMemcpyHostToDevice));
            auto* op = reinterpret_cast<cuda::bf16*>(d_out.ptr);
            const int count = static_cast<int>(host_problems.size());
            if (fp8) {
              CUDA_ASSERT(cuda::SkinnyGemmGroupedFp8(xp, d_codes.ptr, d_scales.ptr, d_problems.ptr, count, max_rows, k,
                                                     n, op, workspace.ptr, sms, pipeline, nullptr));
            } else {
              CUDA_ASSERT(cuda::SkinnyGemmGrouped(xp, reinterpret_cast<const cuda::bf16*>(d_w.ptr), d_problems.ptr,
                                                  count, max_rows, k, n, op, workspace.ptr, sms, pipeline, nullptr));
            }
            CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < out.size(); ++i) {
              if (std::isnan(want[i])) {
                ASSERT_EQ(out[i], kUntouched) << "row " << i / n << " column " << i % n << " named by no problem";
                continue;
              }
              const double got = Elem16<cuda::bf16>::Value(out[i]);
              ASSERT_NEAR(got, want[i], Elem16<cuda::bf16>::kTolerance * std::fabs(want[i]) + 1e-5 * magnitude[i])
                  << "row " << i / n << " column " << i % n;
            }
          }
        }
      }
    }
  }
}

TEST(SkinnyGemmGroupedTest, RefusesWhatItCannotRun) {
  KVT_SKIP_WITHOUT_SM90();
  DeviceBuffer<uint16_t> buf(4096);
  DeviceBuffer<int4> problems(1);
  const auto* x = reinterpret_cast<const cuda::bf16*>(buf.ptr);
  auto* out = reinterpret_cast<cuda::bf16*>(buf.ptr);
  auto grouped = [&](const int4* p, int count, int max_rows, int64_t n) {
    return cuda::SkinnyGemmGrouped(x, x, p, count, max_rows, 512, n, out, buf.ptr, 132,
                                   cuda::SkinnyPipeline::kOverlapped, nullptr);
  };
  EXPECT_EQ(grouped(nullptr, 1, 16, 264), cudaErrorInvalidValue);
  EXPECT_EQ(grouped(problems.ptr, 0, 16, 264), cudaErrorInvalidValue);
  EXPECT_EQ(grouped(problems.ptr, 1, 129, 264), cudaErrorInvalidValue);
  EXPECT_EQ(grouped(problems.ptr, 1, 16, 260), cudaErrorInvalidValue);  // n not a multiple of 8
  const int most = cuda::SkinnyGroupedMaxProblems(4096);
  EXPECT_EQ(most, 16384 / 32);
  EXPECT_EQ(grouped(problems.ptr, most + 1, 16, 4096), cudaErrorInvalidValue);  // more tiles than counters
  EXPECT_EQ(cuda::SkinnyGroupedMaxProblems(0), 0);
  EXPECT_EQ(cuda::SkinnyGemmGroupedFp8(x, reinterpret_cast<const uint8_t*>(buf.ptr), nullptr, problems.ptr, 1, 16, 512,
                                       264, out, buf.ptr, 132, cuda::SkinnyPipeline::kOverlapped, nullptr),
            cudaErrorInvalidValue);
  cudaGetLastError();
}

}  // namespace
}  // namespace kvtier
