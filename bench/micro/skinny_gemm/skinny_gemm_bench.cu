// Tiling variants of the skinny tensor-core GEMM (skinny_gemm.cu beside this file: an
// experiment, not part of the library — it did not beat cuBLAS at 64+ rows, see
// src/backend/cuda/NOTES.md) on the
// Llama-3-8B decode shapes, against cublasGemmEx: mma.sync vs wgmma, k step 64 vs 128 per
// token tile MT (earlier runs also tried BN 256, 2 CTAs/SM, L2 prefetch: all slower). Also checks each variant against a naive fp32 kernel.
// out(m, n) = x(m, k) * w(n, k)^T; weights rotated over 8 copies (from HBM, not L2).
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc \
//          -Ibench/micro/skinny_gemm bench/micro/skinny_gemm/skinny_gemm_bench.cu -lcublas \
//          -o skinny_gemm_bench
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "skinny_gemm.cu"

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));          \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

using kvtier::cuda::bf16;

__global__ void Fill(bf16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16(((h % 2001) - 1000) * 0.001f);
  }
}

// One thread per output: the reference.
__global__ void Naive(const bf16* x, const bf16* w, int m, int k, int n, float* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (c >= n || r >= m) return;
  float s = 0;
  for (int i = 0; i < k; ++i) s += __bfloat162float(x[size_t(r) * k + i]) * __bfloat162float(w[size_t(c) * k + i]);
  out[size_t(r) * n + c] = s;
}

using LaunchFn = cudaError_t (*)(const bf16*, const bf16*, int, int, int, void*, void*, cudaStream_t);

struct Variant {
  const char* name;
  int mt;
  LaunchFn fn;
};

template <int MT, int BN, int BK, int WN, int CTAS, bool WG>
cudaError_t V(const bf16* x, const bf16* w, int m, int k, int n, void* out, void* ws, cudaStream_t s) {
  return kvtier::cuda::LaunchSkinny<MT, BN, BK, WN, CTAS, WG, false>(x, w, m, k, n, out, ws, s);
}

double TimeUs(cudaStream_t stream, int copies, const std::function<void(int)>& launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < copies; ++i) launch(i);
  std::vector<double> v;
  const int per = 4 * copies;
  for (int rep = 0; rep < 7; ++rep) {
    CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < per; ++i) launch(i % copies);
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(1000.0 * ms / per);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Optional argv[1]: run only variants whose name contains it (a variant that faults kills
// the context, so variants can be run one process each).
int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : nullptr;
  struct Shape {
    const char* name;
    int n, k;
  } shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  const Variant variants[] = {
      {"mma 16/128", 16, V<16, 128, 128, 8, 1, false>},   {"wg 16/64", 16, V<16, 128, 64, 8, 1, true>},
      {"wg 16/128", 16, V<16, 128, 128, 8, 1, true>},
      {"mma 32/128", 32, V<32, 128, 128, 4, 1, false>},   {"wg 32/64", 32, V<32, 128, 64, 8, 1, true>},
      {"wg 32/128", 32, V<32, 128, 128, 8, 1, true>},
      {"mma 64/128", 64, V<64, 128, 128, 4, 1, false>},   {"wg 64/64", 64, V<64, 128, 64, 8, 1, true>},
      {"wg 64/128", 64, V<64, 128, 128, 8, 1, true>},
      {"mma 128/128", 128, V<128, 128, 128, 4, 1, false>}, {"wg 128/64", 128, V<128, 128, 64, 8, 1, true>},
      {"wg 128/128", 128, V<128, 128, 128, 8, 1, true>},
  };




  const int copies = 8;
  const size_t max_w = size_t(28672) * 4096;
  bf16 *w, *x, *out;
  float *ref, *got;
  CHECK(cudaMalloc(&w, max_w * copies * 2));
  CHECK(cudaMalloc(&x, size_t(128) * 14336 * 2));
  CHECK(cudaMalloc(&out, size_t(128) * 28672 * 4));
  CHECK(cudaMalloc(&ref, size_t(128) * 28672 * 4));
  CHECK(cudaMalloc(&got, size_t(128) * 28672 * 4));
  Fill<<<4096, 256>>>(w, max_w * copies, 1);
  Fill<<<4096, 256>>>(x, size_t(128) * 14336, 2);
  const size_t ws_bytes = 64 << 20;
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  CHECK(cudaMemset(ws, 0, ws_bytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t blas;
  cublasCreate(&blas);
  cublasSetStream(blas, stream);
  std::vector<float> h_ref, h_out;
  std::printf("shape    variant   m   us     TB/s   relerr   | cublas us TB/s\n");
  for (const Shape& s : shapes) {
    const size_t we = size_t(s.n) * s.k;
    for (const int m : {16, 32, 64, 100, 128}) {
      Naive<<<dim3((s.n + 127) / 128, m), 128, 0, stream>>>(x, w, m, s.k, s.n, ref);
      CHECK(cudaStreamSynchronize(stream));
      h_ref.resize(size_t(m) * s.n);
      CHECK(cudaMemcpy(h_ref.data(), ref, h_ref.size() * 4, cudaMemcpyDeviceToHost));
      const float alpha = 1, beta = 0;
      const double cub = TimeUs(stream, copies, [&](int c) {
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, w + we * c, CUDA_R_16BF, s.k, x,
                     CUDA_R_16BF, s.k, &beta, out, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
      for (const Variant& v : variants) {
        const int mt = m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128;
        if (v.mt != mt || (only != nullptr && std::strstr(v.name, only) == nullptr)) continue;
        // correctness on copy 0, bf16 out
        CHECK(cudaMemset(out, 0xFF, size_t(m) * s.n * 2));
        CHECK(v.fn(x, w, m, s.k, s.n, out, ws, stream));
        CHECK(cudaStreamSynchronize(stream));
        std::vector<uint16_t> hb(size_t(m) * s.n);
        CHECK(cudaMemcpy(hb.data(), out, hb.size() * 2, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t i = 0; i < hb.size(); ++i) {
          uint32_t bits = uint32_t(hb[i]) << 16;
          float f;
          std::memcpy(&f, &bits, 4);
          if (!std::isfinite(f)) { num = INFINITY; break; }
          num += double(f - h_ref[i]) * (f - h_ref[i]);
          den += double(h_ref[i]) * h_ref[i];
        }
        const double us = TimeUs(stream, copies, [&](int c) { CHECK(v.fn(x, w + we * c, m, s.k, s.n, out, ws, stream)); });
        std::printf("%-8s %-12s %4d %6.1f %6.2f %8.1e | %6.1f %5.2f\n", s.name, v.name, m, us, 2.0 * we / us * 1e-6,
                    std::sqrt(num / den), cub, 2.0 * we / cub * 1e-6);
      }
    }
  }
  return 0;
}
