// Whether cuBLASLt's fp8 GEMM with outer-vector scales (one fp32 scale per weight row and
// one per token) pays for the prefill projections: for each Llama-3-8B weight shape (n, k)
// and m tokens, times cuBLAS bf16 (cublasGemmEx), cuBLASLt fp8 with OUTER_VEC_32F scales
// (best of the heuristic's algorithms), and fp8 with scalar scales (the fallback if the
// outer-vector mode is refused), weights rotated over copies so they come from HBM; checks
// the outer-vector result against bf16 of the same dequantized values (relative error).
// out(m, n) = (x8 * sx)(m, k) * ((w8 * sw)(n, k))^T, bf16 out.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/micro/fp8_lt_gemm.cu -lcublasLt -lcublas -o fp8_lt_gemm
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
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

__device__ float Hash(size_t i, unsigned seed) {
  unsigned h = static_cast<unsigned>(i) * 2654435761u ^ (seed * 40503u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (h % 20001) * 1e-4f - 1.0f;  // [-1, 1]
}
__global__ void FillFp8(__nv_fp8_e4m3* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = __nv_fp8_e4m3(Hash(i, seed) * 400.0f);
  }
}
__global__ void FillScales(float* p, int n, unsigned seed) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] = (Hash(i, seed) + 1.5f) * 1e-3f;
  }
}
// The same values dequantized to bf16 (the reference's operands).
__global__ void Dequantize(const __nv_fp8_e4m3* codes, const float* scales, int rows, int cols, __nv_bfloat16* out) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(float(codes[i]) * scales[i / cols]);
  }
}

int main() {
  struct Shape {
    const char* name;
    int n, k;
  } shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  const int copies = 4;
  const int max_m = 8192;
  const size_t max_w = size_t(28672) * 4096;
  __nv_fp8_e4m3 *w8, *x8;
  __nv_bfloat16 *wb, *xb, *out, *ref;
  float *sw, *sx;
  CHECK(cudaMalloc(&w8, max_w * copies));
  CHECK(cudaMalloc(&wb, max_w * copies * 2));
  CHECK(cudaMalloc(&x8, size_t(max_m) * 14336));
  CHECK(cudaMalloc(&xb, size_t(max_m) * 14336 * 2));
  CHECK(cudaMalloc(&out, size_t(max_m) * 28672 * 2));
  CHECK(cudaMalloc(&ref, size_t(max_m) * 28672 * 2));
  CHECK(cudaMalloc(&sw, 28672 * copies * sizeof(float)));
  CHECK(cudaMalloc(&sx, max_m * sizeof(float)));
  FillFp8<<<4096, 256>>>(w8, max_w * copies, 1);
  FillFp8<<<4096, 256>>>(x8, size_t(max_m) * 14336, 2);
  FillScales<<<64, 256>>>(sw, 28672 * copies, 3);
  FillScales<<<64, 256>>>(sx, max_m, 4);
  CHECK(cudaGetLastError());
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
    for (int i = 0; i < 25; ++i) {
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
  std::printf("%-8s %5s %10s %10s %10s %8s %8s %10s %8s\n", "shape", "m", "bf16 us", "fp8vec us", "fp8scal us",
              "vec/bf16", "TFLOP/s", "rel err", "algos");
  double total_bf = 0, total_vec = 0;
  for (int m : {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}) {
    double layer_bf = 0, layer_vec = 0;
    for (const Shape& s : shapes) {
      const float alpha = 1.0f, beta = 0.0f;
      for (int c = 0; c < copies; ++c) {
        Dequantize<<<4096, 256>>>(w8 + size_t(c) * max_w, sw + c * 28672, s.n, s.k, wb + size_t(c) * max_w);
      }
      Dequantize<<<4096, 256>>>(x8, sx, m, s.k, xb);
      CHECK(cudaGetLastError());
      const float t_bf = timed([&](int c) {
        LT(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, wb + size_t(c) * max_w, CUDA_R_16BF, s.k,
                        xb, CUDA_R_16BF, s.k, &beta, ref, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      // Reference (copy 0) for the error check.
      LT(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, wb, CUDA_R_16BF, s.k, xb, CUDA_R_16BF, s.k,
                      &beta, ref, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      float t_mode[2] = {NAN, NAN};
      int found_mode[2] = {0, 0};
      double rel = NAN;
      for (int mode = 0; mode < 2; ++mode) {  // 0: outer vectors, 1: scalars
        cublasLtMatmulDesc_t desc;
        LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        int32_t scale_mode = mode == 0 ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scale_mode, sizeof scale_mode));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scale_mode, sizeof scale_mode));
        cublasLtMatrixLayout_t la, lb, lc;
        LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, s.k, s.n, s.k));
        LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, s.k, m, s.k));
        LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, m, s.n));
        cublasLtMatmulPreference_t pref;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
        cublasLtMatmulHeuristicResult_t results[16];
        int found = 0;
        // The scale pointers are part of the descriptor the heuristic sees.
        const float* a_scale = sw;
        const float* b_scale = sx;
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
        const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 16, results, &found);
        if (hs != CUBLAS_STATUS_SUCCESS) found = 0;
        found_mode[mode] = found;
        float best = 1e30f;
        for (int i = 0; i < found; ++i) {
          const float t = timed([&](int c) {
            const float* asc = sw + c * 28672;
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &asc, sizeof asc));
            LT(cublasLtMatmul(lt, desc, &alpha, w8 + size_t(c) * max_w, la, x8, lb, &beta, out, lc, out, lc,
                              &results[i].algo, ws, ws_bytes, nullptr));
          });
          best = std::min(best, t);
        }
        if (found > 0) t_mode[mode] = best;
        if (mode == 0 && found > 0) {
          const float* asc = sw;
          LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &asc, sizeof asc));
          LT(cublasLtMatmul(lt, desc, &alpha, w8, la, x8, lb, &beta, out, lc, out, lc, &results[0].algo, ws, ws_bytes,
                            nullptr));
          CHECK(cudaDeviceSynchronize());
          const size_t count = size_t(m) * s.n;
          std::vector<__nv_bfloat16> h_out(count), h_ref(count);
          CHECK(cudaMemcpy(h_out.data(), out, count * 2, cudaMemcpyDeviceToHost));
          CHECK(cudaMemcpy(h_ref.data(), ref, count * 2, cudaMemcpyDeviceToHost));
          double num = 0, den = 0;
          for (size_t i = 0; i < count; ++i) {
            const double o = __bfloat162float(h_out[i]), r = __bfloat162float(h_ref[i]);
            num += (o - r) * (o - r);
            den += r * r;
          }
          rel = std::sqrt(num / std::max(den, 1e-30));
        }
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(desc);
      }
      const double flops = 2.0 * m * s.n * s.k;
      std::printf("%-8s %5d %10.1f %10.1f %10.1f %8.3f %8.1f %10.2e %4d/%d\n", s.name, m, t_bf, t_mode[0], t_mode[1],
                  t_mode[0] / t_bf, flops / t_mode[0] / 1e6, rel, found_mode[0], found_mode[1]);
      layer_bf += t_bf;
      layer_vec += t_mode[0];
    }
    std::printf("layer   %5d %10.1f %10.1f %21s %8.3f  (32 layers: bf16 %.2f ms, fp8 %.2f ms)\n", m, layer_bf, layer_vec, "",
                layer_vec / layer_bf, layer_bf * 32e-3, layer_vec * 32e-3);
    total_bf += layer_bf;
    total_vec += layer_vec;
  }
  std::printf("RESULT fp8_lt_gemm all_m bf16_us %.1f fp8_outer_vec_us %.1f ratio %.3f\n", total_bf, total_vec,
              total_vec / total_bf);
  return 0;
}
