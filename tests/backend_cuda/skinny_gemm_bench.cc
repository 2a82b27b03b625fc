// Per-shape timing of the decode-batch projections on the Llama-3-8B shapes: cuBLAS
// (what Gemm runs for bf16 without the skinny kernel) and SkinnyGemm's three pipelines for bf16
// weights; SkinnyFp8 (mma.sync + finish kernel) and SkinnyGemmFp8's two pipelines for fp8
// codes; SkinnyGemmW8A8's three pipelines for fp8 codes on both sides. Back-to-back launches on one stream, weights rotated over copies that together
// exceed the L2 (so they come from HBM), cudaEvents around them; prints microseconds per call
// and the weight bytes streamed per second. Not a test (disabled; it checks nothing): the
// dispatch in projections.cc follows its tables. Run it with
//   kvtier_cuda_skinny_test --gtest_also_run_disabled_tests --gtest_filter='SkinnyGemmBench.*'
// (rows per step from KVTIER_SKINNY_BENCH_ROWS, default 16,32,64,128).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/fp8_skinny.h"
#include "backend/cuda/skinny_gemm.h"
#include "bench_check.h"
#include "bench_env.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

struct Shape {
  const char* name;
  int n, k;
  bool f32_out;  // the LM head writes fp32 logits (and stays 16-bit with fp8 weights)
};
constexpr Shape kShapes[] = {{"qkv", 6144, 4096, false},
                             {"o", 4096, 4096, false},
                             {"gate_up", 28672, 4096, false},
                             {"down", 4096, 14336, false},
                             {"lm_head", 128256, 4096, true}};

// Microseconds per call of fn(copy) over `iters` calls rotating the copies.
double TimeUs(const std::function<cudaError_t(int)>& fn, int copies, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) KVT_BENCH_CUDA_CHECK(fn(i % copies));
  cudaEvent_t start, stop;
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&start));
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kIters = 40;
  KVT_BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kIters; ++i) KVT_BENCH_CUDA_CHECK(fn(i % copies));
  KVT_BENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
  KVT_BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  KVT_BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1000.0 * ms / kIters;
}

constexpr cuda::SkinnyPipeline kPipelines[] = {cuda::SkinnyPipeline::kSerial, cuda::SkinnyPipeline::kOverlapped,
                                               cuda::SkinnyPipeline::kTma};

std::string Label(const char* kernel, cuda::SkinnyPipeline pipeline) {
  const char* names[] = {"serial", "overlapped", "tma"};
  return std::string(kernel) + " " + names[static_cast<int>(pipeline)];
}

TEST(SkinnyGemmBench, DISABLED_PerShape) {
  KVT_SKIP_WITHOUT_CUDA();
  const std::vector<int> row_counts = EnvIntList("KVTIER_SKINNY_BENCH_ROWS", "16,32,64,128");
  cudaDeviceProp props{};
  KVT_BENCH_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
  const int sms = props.multiProcessorCount;
  std::printf("device %s, %d SMs, L2 %d MB\n", props.name, sms, props.l2CacheSize >> 20);
  const bool skinny_ok = cuda::SkinnyGemmDeviceOk(0);
  if (skinny_ok) KVT_BENCH_CUDA_CHECK(cuda::SkinnyGemmInit());
  KVT_BENCH_CUDA_CHECK(cuda::SkinnyFp8Init());
  cudaStream_t stream;
  KVT_BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t cublas;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  cublasSetStream(cublas, stream);
  void* cublas_ws = nullptr;
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&cublas_ws, 32 << 20));
  cublasSetWorkspace(cublas, cublas_ws, 32 << 20);

  // KVTIER_SKINNY_BENCH_SWEEP=1: the TMA pipeline under every SkinnyTmaTuning as well.
  const bool sweep = std::getenv("KVTIER_SKINNY_BENCH_SWEEP") != nullptr;
  const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  const size_t ws_bytes = cuda::SkinnyGemmWorkspaceBytes(std::min(max_rows, 128), sms);
  void* workspace = nullptr;
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&workspace, ws_bytes));
  KVT_BENCH_CUDA_CHECK(cudaMemset(workspace, 0, ws_bytes));
  cuda::bf16* x = nullptr;
  void* out = nullptr;
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&x, size_t{128} * 14336 * 2));
  KVT_BENCH_CUDA_CHECK(cudaMemset(x, 0x3c, size_t{128} * 14336 * 2));
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&out, size_t{128} * 128256 * 4));

  std::printf("%-8s %4s %-22s %9s %8s\n", "shape", "rows", "kernel", "us", "GB/s");
  for (const Shape& s : kShapes) {
    const size_t elements = static_cast<size_t>(s.n) * s.k;
    // Copies that together exceed 4x the L2, so every call streams from HBM.
    const int copies = static_cast<int>(std::max<size_t>(1, (size_t{4} * props.l2CacheSize) / elements + 1));
    std::vector<cuda::bf16*> w16(copies);
    std::vector<uint8_t*> w8(copies);
    float* scales = nullptr;
    KVT_BENCH_CUDA_CHECK(cudaMalloc(&scales, s.n * sizeof(float)));
    KVT_BENCH_CUDA_CHECK(cudaMemset(scales, 0, s.n * sizeof(float)));
    for (int c = 0; c < copies; ++c) {
      KVT_BENCH_CUDA_CHECK(cudaMalloc(&w16[c], elements * 2));
      KVT_BENCH_CUDA_CHECK(cudaMemset(w16[c], 0x3b, elements * 2));
      KVT_BENCH_CUDA_CHECK(cudaMalloc(&w8[c], elements));
      KVT_BENCH_CUDA_CHECK(cudaMemset(w8[c], 0x35, elements));
    }
    float* partial = nullptr;
    const int splits = cuda::SkinnyFp8Splits(s.n, s.k, sms);
    KVT_BENCH_CUDA_CHECK(cudaMalloc(&partial, cuda::SkinnyFp8PartialFloats(64, s.n, splits) * sizeof(float)));
    for (int rows : row_counts) {
      auto report = [&](const char* kernel, double us, size_t bytes) {
        std::printf("%-8s %4d %-22s %9.1f %8.0f\n", s.name, rows, kernel, us, bytes / (us * 1e3));
      };
      const float alpha = 1.0f, beta = 0.0f;
      report("bf16 cublas", TimeUs([&](int c) {
               return cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, rows, s.k, &alpha, w16[c], CUDA_R_16BF, s.k,
                                   x, CUDA_R_16BF, s.k, &beta, out, s.f32_out ? CUDA_R_32F : CUDA_R_16BF, s.n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
                          ? cudaSuccess
                          : cudaErrorUnknown;
             }, copies, stream), elements * 2);
      if (skinny_ok) {
        for (auto pipeline : kPipelines) {
          report(Label("bf16 skinny", pipeline).c_str(), TimeUs([&](int c) {
                   return cuda::SkinnyGemm(x, w16[c], rows, s.k, s.n, out, s.f32_out, workspace, sms, pipeline,
                                           stream);
                 }, copies, stream), elements * 2);
          if (pipeline == cuda::SkinnyPipeline::kTma && sweep) {
            for (int promotion : {0, 128}) {
              for (bool hints : {false, true}) {
                cuda::SetSkinnyTmaTuning({256, promotion, hints});
                const std::string label = "bf16 tma p" + std::to_string(promotion) + (hints ? " h" : "");
                report(label.c_str(), TimeUs([&](int c) {
                         return cuda::SkinnyGemm(x, w16[c], rows, s.k, s.n, out, s.f32_out, workspace, sms, pipeline,
                                                 stream);
                       }, copies, stream), elements * 2);
              }
            }
            cuda::SetSkinnyTmaTuning(cuda::SkinnyTmaTuning());
          }
        }
      }
      if (s.f32_out) continue;
      if (rows <= cuda::kSkinnyFp8MaxRows) {
        report("fp8 SkinnyFp8", TimeUs([&](int c) {
                 return cuda::SkinnyFp8(x, rows, w8[c], scales, s.n, s.k, splits, partial, std::nullopt,
                                        static_cast<cuda::bf16*>(out), stream);
               }, copies, stream), elements);
      }
      if (skinny_ok) {
        for (auto pipeline : kPipelines) {
          if (pipeline != cuda::SkinnyPipeline::kTma) {  // W8A16 has no TMA pipeline of its own
            report(Label("fp8 skinny", pipeline).c_str(), TimeUs([&](int c) {
                     return cuda::SkinnyGemmFp8(x, w8[c], scales, rows, s.k, s.n, static_cast<cuda::bf16*>(out),
                                                workspace, sms, pipeline, stream);
                   }, copies, stream), elements);
          }
          // W8A8: the activations as codes too (x's bytes read as codes, the first rows' scales).
          report(Label("w8a8 skinny", pipeline).c_str(), TimeUs([&](int c) {
                   return cuda::SkinnyGemmW8A8(reinterpret_cast<const uint8_t*>(x), scales, w8[c], scales, rows, s.k,
                                               s.n, static_cast<cuda::bf16*>(out), workspace, sms, pipeline, stream);
                 }, copies, stream), elements);
          if (pipeline == cuda::SkinnyPipeline::kTma && sweep) {
            // The TMA pipeline's tuning: row bytes per step, L2 promotion, eviction hints.
            for (int row_bytes : {128, 256}) {
              for (int promotion : {0, 128, 256}) {
                for (bool hints : {false, true}) {
                  cuda::SetSkinnyTmaTuning({row_bytes, promotion, hints});
                  const std::string label = "w8a8 tma r" + std::to_string(row_bytes) + " p" +
                                            std::to_string(promotion) + (hints ? " h" : "");
                  report(label.c_str(), TimeUs([&](int c) {
                           return cuda::SkinnyGemmW8A8(reinterpret_cast<const uint8_t*>(x), scales, w8[c], scales,
                                                       rows, s.k, s.n, static_cast<cuda::bf16*>(out), workspace, sms,
                                                       pipeline, stream);
                         }, copies, stream), elements);
                }
              }
            }
            cuda::SetSkinnyTmaTuning(cuda::SkinnyTmaTuning());
          }
        }
      }
    }
    KVT_BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int c = 0; c < copies; ++c) {
      cudaFree(w16[c]);
      cudaFree(w8[c]);
    }
    cudaFree(scales);
    cudaFree(partial);
  }
  cudaFree(workspace);
  cudaFree(x);
  cudaFree(out);
  cudaFree(cublas_ws);
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  std::fflush(stdout);
}

}  // namespace
}  // namespace kvtier
