// SkinnyGemm / SkinnyGemmFp8 (backend/cuda/skinny_gemm.h) against double-precision products of
// the same bf16 values / fp8 codes: every token tile, both pipelines, ragged n and k, tiles
// split over CTAs (stream-K) and whole; bitwise repeatability (the counters reset) and graph
// capture. Skips without a compute capability 9.0 GPU (the kernels are sm_90a code).
#include <cmath>
#include <random>
#include <utility>
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

struct Shape {
  int64_t n, k;
};
// A few tiles with a ragged last one; long k (a tile's steps split over CTAs); k not a
// multiple of the 128-wide step.
constexpr Shape kShapes[] = {{264, 512}, {136, 4096}, {1024, 16 * 36}};
constexpr int kRows[] = {3, 16, 17, 64, 100, 128};
constexpr int kSms[] = {132, 7};  // one CTA per SM: many partly covered tiles, and few CTAs
// kTma runs W8A16 as kOverlapped (it converts codes in shared memory).
constexpr cuda::SkinnyPipeline kPipelines[] = {cuda::SkinnyPipeline::kSerial, cuda::SkinnyPipeline::kOverlapped,
                                               cuda::SkinnyPipeline::kTma};

// The device operands of one fp8 skinny GEMM: x (rows, k) bf16, the (n, k) codes and their
// row scales, the (rows, n) output and a workspace for 132 SMs.
struct Fp8GemmOperands {
  Fp8GemmOperands(const cuda_test::Data16& x_host, const std::vector<uint8_t>& codes_host, int rows, int64_t n)
      : x(x_host.bits.size()),
        out(rows * n),
        codes(codes_host.size()),
        scales(n),
        workspace_bytes(cuda::SkinnyGemmWorkspaceBytes(rows, 132)),
        workspace(workspace_bytes) {}
  // Copies the host operands in and zeroes the workspace.
  void Upload(const cuda_test::Data16& x_host, const std::vector<uint8_t>& codes_host,
              const std::vector<float>& scales_host) {
    CUDA_ASSERT(cudaMemset(workspace.ptr, 0, workspace_bytes));
    CUDA_ASSERT(cudaMemcpy(x.ptr, x_host.bits.data(), x_host.bits.size() * 2, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(codes.ptr, codes_host.data(), codes_host.size(), cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(scales.ptr, scales_host.data(), scales_host.size() * 4, cudaMemcpyHostToDevice));
  }

  DeviceBuffer<uint16_t> x, out;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
  const size_t workspace_bytes;
  DeviceBuffer<uint8_t> workspace;
};

// Codes and per-row scales of an (n, k) fp8 weight.
void RandomCodes(int64_t n, int64_t k, std::mt19937& rng, std::vector<uint8_t>* codes, std::vector<float>* scales) {
  cuda_test::RandomFp8(n, k, rng, codes, scales, 1e-3f, 1e-1f);
}

// sum_k x * w * scale in double, and the sum of the magnitudes of its terms (the bound of
// fp32 accumulation error), for every (row, column).
struct Reference {
  std::vector<double> dot, magnitude;
};
Reference Products(const std::vector<float>& x, int rows, int64_t k, const std::vector<float>& w,
                   const std::vector<float>& scales, int64_t n) {
  Reference ref{std::vector<double>(rows * n), std::vector<double>(rows * n)};
  for (int r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double dot = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const double term = static_cast<double>(x[r * k + i]) * w[c * k + i];
        dot += term;
        magnitude += std::fabs(term);
      }
      const double s = scales.empty() ? 1.0 : scales[c];
      ref.dot[r * n + c] = dot * s;
      ref.magnitude[r * n + c] = magnitude * s;
    }
  }
  return ref;
}

void ExpectMatches(const Reference& ref, int64_t n, const std::vector<float>& got, double tolerance,
                   double accumulation = 1e-5) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], ref.dot[i], tolerance * std::fabs(ref.dot[i]) + accumulation * ref.magnitude[i])
        << "row " << i / n << " column " << i % n;
  }
}

std::vector<float> Bf16Values(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = Elem16<cuda::bf16>::Value(bits[i]);
  return v;
}

TEST(SkinnyGemmTest, RefusesWhatItCannotRun) {
  KVT_SKIP_WITHOUT_SM90();
  DeviceBuffer<uint16_t> buf(4096);
  const void* p = buf.ptr;
  EXPECT_TRUE(cuda::SkinnyGemmSupported(3, 512, 264, p, p));
  EXPECT_FALSE(cuda::SkinnyGemmSupported(0, 512, 264, p, p));
  EXPECT_FALSE(cuda::SkinnyGemmSupported(129, 512, 264, p, p));
  EXPECT_FALSE(cuda::SkinnyGemmSupported(3, 520, 264, p, p));  // k not a multiple of 16
  EXPECT_FALSE(cuda::SkinnyGemmSupported(3, 512, 260, p, p));  // n not a multiple of 8
  EXPECT_FALSE(cuda::SkinnyGemmSupported(3, 512, 264, static_cast<const char*>(p) + 2, p));
  EXPECT_EQ(cuda::SkinnyGemm(reinterpret_cast<const cuda::bf16*>(p), reinterpret_cast<const cuda::bf16*>(p), 3, 512,
                             264, buf.ptr, false, nullptr, 132, cuda::SkinnyPipeline::kSerial, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::SkinnyGemmFp8(reinterpret_cast<const cuda::bf16*>(p), reinterpret_cast<const uint8_t*>(p), nullptr,
                                3, 512, 264, reinterpret_cast<cuda::bf16*>(buf.ptr), buf.ptr, 132,
                                cuda::SkinnyPipeline::kSerial, nullptr),
            cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(SkinnyGemmTest, MatchesTheReference) {
  KVT_SKIP_WITHOUT_SM90();
  ASSERT_EQ(cuda::SkinnyGemmInit(), cudaSuccess);
  std::mt19937 rng(17);
  DeviceBuffer<uint8_t> workspace(cuda::SkinnyGemmWorkspaceBytes(128, 132));
  CUDA_ASSERT(cudaMemset(workspace.ptr, 0, cuda::SkinnyGemmWorkspaceBytes(128, 132)));
  for (const Shape& shape : kShapes) {
    const int64_t n = shape.n, k = shape.k;
    cuda_test::Data16 w = cuda_test::Random16<cuda::bf16>(n * k, rng);
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    RandomCodes(n, k, rng, &codes, &scales);
    std::vector<float> code_values(codes.size());
    for (size_t i = 0; i < codes.size(); ++i) code_values[i] = Fp8E4M3ToFloat(codes[i]);
    DeviceBuffer<uint16_t> d_w(w.bits.size());
    DeviceBuffer<uint8_t> d_codes(codes.size());
    DeviceBuffer<float> d_scales(n);
    CUDA_ASSERT(cudaMemcpy(d_w.ptr, w.bits.data(), w.bits.size() * 2, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(d_codes.ptr, codes.data(), codes.size(), cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(d_scales.ptr, scales.data(), n * 4, cudaMemcpyHostToDevice));
    for (int rows : kRows) {
      cuda_test::Data16 x = cuda_test::Random16<cuda::bf16>(rows * k, rng);
      DeviceBuffer<uint16_t> d_x(x.bits.size()), d_out(rows * n);
      DeviceBuffer<float> d_out32(rows * n);
      CUDA_ASSERT(cudaMemcpy(d_x.ptr, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
      const auto* xp = reinterpret_cast<const cuda::bf16*>(d_x.ptr);
      const Reference want16 = Products(x.values, rows, k, w.values, {}, n);
      const Reference want8 = Products(x.values, rows, k, code_values, scales, n);
      for (int sms : kSms) {
        for (auto pipeline : kPipelines) {
          SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " rows " << rows << " sms " << sms
                                            << " pipeline " << static_cast<int>(pipeline));
          std::vector<uint16_t> out(rows * n);
          std::vector<float> out32(rows * n);
          // bf16 weights, bf16 and f32 output.
          CUDA_ASSERT(cuda::SkinnyGemm(xp, reinterpret_cast<const cuda::bf16*>(d_w.ptr), rows, k, n, d_out.ptr, false,
                                       workspace.ptr, sms, pipeline, nullptr));
          CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
          ExpectMatches(want16, n, Bf16Values(out), Elem16<cuda::bf16>::kTolerance);
          CUDA_ASSERT(cuda::SkinnyGemm(xp, reinterpret_cast<const cuda::bf16*>(d_w.ptr), rows, k, n, d_out32.ptr,
                                       true, workspace.ptr, sms, pipeline, nullptr));
          CUDA_ASSERT(cudaMemcpy(out32.data(), d_out32.ptr, out32.size() * 4, cudaMemcpyDeviceToHost));
          ExpectMatches(want16, n, out32, 1e-5);
          // fp8 codes with per-row scales.
          CUDA_ASSERT(cuda::SkinnyGemmFp8(xp, d_codes.ptr, d_scales.ptr, rows, k, n,
                                          reinterpret_cast<cuda::bf16*>(d_out.ptr), workspace.ptr, sms, pipeline,
                                          nullptr));
          CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
          ExpectMatches(want8, n, Bf16Values(out), Elem16<cuda::bf16>::kTolerance);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// W8A8: activation codes with a scale per token, weight codes with a scale per row, read by
// the fp8 wgmma as they are. Its accumulation keeps fewer bits than fp32 (about 14: up to
// 2.8e-4 of the terms' magnitude seen on the H200), hence the looser accumulation bound; a
// wrong layout or scale is off by the value itself. The output's bf16 rounding as above.
TEST(SkinnyGemmTest, W8A8MatchesTheReference) {
  KVT_SKIP_WITHOUT_SM90();
  ASSERT_EQ(cuda::SkinnyGemmInit(), cudaSuccess);
  std::mt19937 rng(23);
  DeviceBuffer<uint8_t> workspace(cuda::SkinnyGemmWorkspaceBytes(128, 132));
  CUDA_ASSERT(cudaMemset(workspace.ptr, 0, cuda::SkinnyGemmWorkspaceBytes(128, 132)));
  for (const Shape& shape : kShapes) {
    const int64_t n = shape.n, k = shape.k;
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    RandomCodes(n, k, rng, &codes, &scales);
    std::vector<float> code_values(codes.size());
    for (size_t i = 0; i < codes.size(); ++i) code_values[i] = Fp8E4M3ToFloat(codes[i]);
    DeviceBuffer<uint8_t> d_codes(codes.size());
    DeviceBuffer<float> d_scales(n);
    CUDA_ASSERT(cudaMemcpy(d_codes.ptr, codes.data(), codes.size(), cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(d_scales.ptr, scales.data(), n * 4, cudaMemcpyHostToDevice));
    for (int rows : kRows) {
      std::vector<uint8_t> x8;
      std::vector<float> x_scales;
      RandomCodes(rows, k, rng, &x8, &x_scales);
      std::vector<float> x_values(x8.size());
      for (size_t i = 0; i < x8.size(); ++i) x_values[i] = Fp8E4M3ToFloat(x8[i]) * x_scales[i / k];
      DeviceBuffer<uint8_t> d_x8(x8.size());
      DeviceBuffer<float> d_x_scales(rows);
      DeviceBuffer<uint16_t> d_out(rows * n);
      CUDA_ASSERT(cudaMemcpy(d_x8.ptr, x8.data(), x8.size(), cudaMemcpyHostToDevice));
      CUDA_ASSERT(cudaMemcpy(d_x_scales.ptr, x_scales.data(), rows * 4, cudaMemcpyHostToDevice));
      const Reference want = Products(x_values, rows, k, code_values, scales, n);
      for (int sms : kSms) {
        for (auto pipeline : kPipelines) {
          // The TMA pipeline with both row widths of codes per step (128 and 256 bytes), its
          // whole ring in flight (0) and fewer steps (1 asks for the least, which is 2); the
          // other pipelines once.
          const bool tma = pipeline == cuda::SkinnyPipeline::kTma;
          for (const auto& [row_bytes, lookahead] :
               tma ? std::vector<std::pair<int, int>>{{256, 0}, {128, 0}, {256, 1}, {128, 1}, {256, 3}, {128, 3}}
                   : std::vector<std::pair<int, int>>{{256, 0}}) {
            cuda::SkinnyTmaTuning tuning;
            tuning.code_row_bytes = row_bytes;
            tuning.lookahead = lookahead;
            cuda::SetSkinnyTmaTuning(tuning);
            SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " rows " << rows << " sms " << sms
                                              << " pipeline " << static_cast<int>(pipeline) << " row bytes "
                                              << row_bytes << " lookahead " << lookahead);
            CUDA_ASSERT(cudaMemset(d_out.ptr, 0xff, rows * n * 2));  // poison: every element must be written
            CUDA_ASSERT(cuda::SkinnyGemmW8A8(d_x8.ptr, d_x_scales.ptr, d_codes.ptr, d_scales.ptr, rows, k, n,
                                             reinterpret_cast<cuda::bf16*>(d_out.ptr), workspace.ptr, sms, pipeline,
                                             nullptr));
            std::vector<uint16_t> out(rows * n);
            CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
            ExpectMatches(want, n, Bf16Values(out), Elem16<cuda::bf16>::kTolerance, 1e-3);
            if (HasFatalFailure()) return;
          }
        }
      }
      cuda::SetSkinnyTmaTuning(cuda::SkinnyTmaTuning());
    }
  }
}

// Codes with a zero exponent (subnormal E4M3, and zero) convert exactly too: a matrix of
// nothing else, so a kernel that flushed them would write zeros.
TEST(SkinnyGemmTest, SubnormalCodesCount) {
  KVT_SKIP_WITHOUT_SM90();
  ASSERT_EQ(cuda::SkinnyGemmInit(), cudaSuccess);
  std::mt19937 rng(11);
  const int rows = 16;
  const int64_t n = 128, k = 256;
  cuda_test::Data16 x = cuda_test::Random16<cuda::bf16>(rows * k, rng);
  std::vector<uint8_t> codes(n * k);
  std::uniform_int_distribution<int> mantissa(0, 7), sign(0, 1);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(mantissa(rng) | (sign(rng) << 7));
  std::vector<float> scales(n, 1.0f), code_values(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) code_values[i] = Fp8E4M3ToFloat(codes[i]);
  Fp8GemmOperands ops(x, codes, rows, n);
  ASSERT_NO_FATAL_FAILURE(ops.Upload(x, codes, scales));
  DeviceBuffer<uint16_t>& d_x = ops.x;
  DeviceBuffer<uint16_t>& d_out = ops.out;
  DeviceBuffer<uint8_t>& d_codes = ops.codes;
  DeviceBuffer<float>& d_scales = ops.scales;
  DeviceBuffer<uint8_t>& workspace = ops.workspace;
  CUDA_ASSERT(cuda::SkinnyGemmFp8(reinterpret_cast<const cuda::bf16*>(d_x.ptr), d_codes.ptr, d_scales.ptr, rows, k, n,
                                  reinterpret_cast<cuda::bf16*>(d_out.ptr), workspace.ptr, 132,
                                  cuda::SkinnyPipeline::kSerial, nullptr));
  std::vector<uint16_t> out(rows * n);
  CUDA_ASSERT(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
  ExpectMatches(Products(x.values, rows, k, code_values, scales, n), n, Bf16Values(out),
                Elem16<cuda::bf16>::kTolerance);
}

// The same call twice gives the same bits (partials summed in a fixed order; the tile
// counters were reset by the first call), and a captured graph replays it.
TEST(SkinnyGemmTest, RepeatsBitForBitAndReplaysInAGraph) {
  KVT_SKIP_WITHOUT_SM90();
  ASSERT_EQ(cuda::SkinnyGemmInit(), cudaSuccess);
  std::mt19937 rng(5);
  const int rows = 64;
  const int64_t n = 1536, k = 4096;
  cuda_test::Data16 x = cuda_test::Random16<cuda::bf16>(rows * k, rng);
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  RandomCodes(n, k, rng, &codes, &scales);
  Fp8GemmOperands ops(x, codes, rows, n);
  ASSERT_NO_FATAL_FAILURE(ops.Upload(x, codes, scales));
  DeviceBuffer<uint16_t>& d_x = ops.x;
  DeviceBuffer<uint16_t>& d_out = ops.out;
  DeviceBuffer<uint8_t>& d_codes = ops.codes;
  DeviceBuffer<float>& d_scales = ops.scales;
  DeviceBuffer<uint8_t>& workspace = ops.workspace;
  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto run = [&](cuda::SkinnyPipeline pipeline) {
    return cuda::SkinnyGemmFp8(reinterpret_cast<const cuda::bf16*>(d_x.ptr), d_codes.ptr, d_scales.ptr, rows, k, n,
                               reinterpret_cast<cuda::bf16*>(d_out.ptr), workspace.ptr, 132, pipeline, stream);
  };
  for (auto pipeline : kPipelines) {
    std::vector<uint16_t> first(rows * n), again(rows * n), replayed(rows * n);
    CUDA_ASSERT(run(pipeline));
    CUDA_ASSERT(cudaMemcpyAsync(first.data(), d_out.ptr, first.size() * 2, cudaMemcpyDeviceToHost, stream));
    CUDA_ASSERT(run(pipeline));
    CUDA_ASSERT(cudaMemcpyAsync(again.data(), d_out.ptr, again.size() * 2, cudaMemcpyDeviceToHost, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    EXPECT_EQ(first, again);
    CUDA_ASSERT(cudaMemset(d_out.ptr, 0, rows * n * 2));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CUDA_ASSERT(run(pipeline));
    CUDA_ASSERT(run(pipeline));
    CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
    CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 3; ++i) CUDA_ASSERT(cudaGraphLaunch(exec, stream));
    CUDA_ASSERT(cudaMemcpyAsync(replayed.data(), d_out.ptr, replayed.size() * 2, cudaMemcpyDeviceToHost, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    EXPECT_EQ(first, replayed);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvtier
