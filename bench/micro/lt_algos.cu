// Which cuBLASLt algorithm serves the decode/prefill projection shapes best: for each
// Llama-3-8B weight shape (n, k) and batch rows m, times cublasGemmEx's default and every
// algorithm cublasLtMatmulAlgoGetHeuristic offers (weights rotated over 8 copies so they
// come from HBM). out(m, n) = x(m, k) * w(n, k)^T, bf16 in, fp32 accumulate, bf16 out.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/micro/lt_algos.cu -lcublasLt -lcublas -o lt_algos
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

#define LT(x)                                                                             \
  do {                                                                                    \
    cublasStatus_t s_ = (x);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      std::printf("%s:%d cublas status %d\n", __FILE__, __LINE__, static_cast<int>(s_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__global__ void Fill(__nv_bfloat16* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16(((i * 2654435761u) % 1000) * 0.0001f - 0.05f);
  }
}

int main() {
  struct Shape {
    const char* name;
    int n, k;
  } shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  const int copies = 8;
  const size_t max_w = size_t(28672) * 4096;
  __nv_bfloat16 *w, *x, *out;
  CHECK(cudaMalloc(&w, max_w * copies * 2));
  CHECK(cudaMalloc(&x, size_t(2048) * 14336 * 2));
  CHECK(cudaMalloc(&out, size_t(2048) * 28672 * 2));
  Fill<<<4096, 256>>>(w, max_w * copies);
  Fill<<<4096, 256>>>(x, size_t(2048) * 14336);
  const size_t ws_bytes = 32 << 20;
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  cublasHandle_t blas;
  LT(cublasCreate(&blas));
  LT(cublasSetWorkspace(blas, ws, ws_bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto timed = [&](auto&& fn) {
    std::vector<float> ms;
    for (int i = 0; i < 40; ++i) {
      CHECK(cudaEventRecord(a));
      fn(i % copies);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float t;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (i >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1e3f;  // us
  };
  for (int m : {64, 128, 2048}) {
    for (const Shape& s : shapes) {
      const double bytes = 2.0 * s.n * s.k + 2.0 * m * s.k + 2.0 * m * s.n;
      const double flops = 2.0 * m * s.n * s.k;
      const float alpha = 1.0f, beta = 0.0f;
      const float t_default = timed([&](int c) {
        LT(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, w + size_t(c) * max_w,
                        CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k, &beta, out, CUDA_R_16BF, s.n,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      // The same product through cuBLASLt: column-major out^T (n x m) = w^T' (n x k) * x' (k x m).
      cublasLtMatmulDesc_t desc;
      LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      cublasLtMatrixLayout_t la, lb, lc;
      LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k));
      LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, m, s.k));
      LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, m, s.n));
      cublasLtMatmulPreference_t pref;
      LT(cublasLtMatmulPreferenceCreate(&pref));
      LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ws_bytes, sizeof ws_bytes));
      cublasLtMatmulHeuristicResult_t results[32];
      int found = 0;
      LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 32, results, &found));
      float best = 1e30f;
      int best_i = -1;
      for (int i = 0; i < found; ++i) {
        const float t = timed([&](int c) {
          LT(cublasLtMatmul(lt, desc, &alpha, w + size_t(c) * max_w, la, x, lb, &beta, out, lc, out,
                            lc, &results[i].algo, ws, ws_bytes, nullptr));
        });
        if (t < best) {
          best = t;
          best_i = i;
        }
      }
      std::printf("m %4d %-8s default %8.1f us (%5.2f TB/s %6.1f TF)  lt best of %2d: #%d %8.1f us (%5.2f TB/s %6.1f TF)  lt #0 %s\n",
                  m, s.name, t_default, bytes / t_default / 1e6, flops / t_default / 1e6, found, best_i,
                  best, bytes / best / 1e6, flops / best / 1e6, found > 0 ? "" : "none");
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(desc);
    }
  }
  return 0;
}
