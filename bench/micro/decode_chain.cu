// Micro-benchmark of the W1 decode step's weight stream without attention: 32 layers of
// (RMSNorm, GEMV qkv, GEMV o, RMSNorm, GEMV gate|up, SiLU*up, GEMV down) + LM head for one
// row, Llama-3-8B shapes, launched (a) one by one, (b) as a CUDA graph, (c) as a graph with
// programmatic dependent launch (KVTIER_CUDA_PDL decides, so run it twice). Also each GEMV
// shape alone. Answers: how far is the GEMV from HBM bandwidth, and what do launch gaps cost.
//
// Session 5 adds the bulk-copy GEMV experiment (gemv_stream.cu here) to the chain and the
// per-shape table; KVTIER_CUDA_PDL_EARLY=0 turns off the early trigger of the norm/SiLU
// kernels (pdl.h).
//
// Build (here): nvcc -O3 -std=c++17 -arch=sm_90 -Isrc --expt-relaxed-constexpr \
//   bench/micro/decode_chain.cu bench/micro/gemv_stream.cu src/backend/cuda/gemv.cu \
//   src/backend/cuda/kernels.cu -lcublas -o decode_chain
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/kernels.h"
#include "gemv_stream.h"
#include "backend/cuda/pdl.h"
#include "launch_env.h"
#include "cuda_check.h"

using kvtier::cuda::bf16;
namespace kc = kvtier::cuda;

// How the chain's kernels are launched (KVTIER_CUDA_PDL, ... as launch_env.h reads them).
static const kvtier::CudaLaunchOptions g_launch = LaunchOptionsFromEnv();

// The chain's GEMV: the warp GEMV, or the bulk-copy GEMV when g_stream.
static bool g_stream = false;
static cudaError_t Gemv(const bf16* x, const bf16* w, int rows, int k, int n, void* out,
                        bool f32, cudaStream_t s) {
  return g_stream && kc::StreamGemvSupported(rows, k, n, x, w)
             ? kc::StreamGemv(x, w, rows, k, n, out, f32, s)
             : kc::GemvSmallRows(x, w, rows, k, n, out, f32, s, g_launch);
}

// Variant GEMV for one row: persistent grid, each warp strides over columns, U loads of 16
// bytes in flight per lane, ld.global.nc with an L2 256-byte prefetch hint.
__device__ __forceinline__ uint4 LoadStream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]);
    const float2 fb = __bfloat1622float2(b[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
  return acc;
}

template <int U>
__global__ void __launch_bounds__(256) GemvPersistent(const bf16* __restrict__ x,
                                                     const bf16* __restrict__ w, int k, int n,
                                                     bf16* out) {
  const int lane = threadIdx.x & 31;
  const int warps_total = gridDim.x * (blockDim.x >> 5);
  const int vecs = k / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  kc::PdlWait();
  kc::PdlLaunchDependents();
  for (int col = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); col < n; col += warps_total) {
    const uint4* wrow = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(col) * k);
    float acc = 0.0f;
    int i = lane;
    for (; i + 32 * (U - 1) < vecs; i += 32 * U) {
      uint4 wv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) wv[u] = LoadStream(wrow + i + 32 * u);
#pragma unroll
      for (int u = 0; u < U; ++u) acc += Dot8(wv[u], __ldg(xv + i + 32 * u));
    }
    for (; i < vecs; i += 32) acc += Dot8(LoadStream(wrow + i), __ldg(xv + i));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) out[col] = __float2bfloat16(acc);
  }
}

// Software-pipelined: the loads of batch b+1 are issued before batch b is consumed, so a
// lane always has U..2U loads in flight. One column per warp, 8 warps per CTA.
template <int U, bool kStream>
__global__ void __launch_bounds__(256) GemvPipelined(const bf16* __restrict__ x,
                                                    const bf16* __restrict__ w, int k, int n,
                                                    bf16* out) {
  const int lane = threadIdx.x & 31;
  const int col = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int vecs = k / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const uint4* wrow = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(col < n ? col : 0) * k);
  const int batches = vecs / (32 * U);  // k = 4096: 4 (U 4); 14336: 14
  uint4 cur[U];
#pragma unroll
  for (int u = 0; u < U; ++u) cur[u] = kStream ? LoadStream(wrow + lane + 32 * u) : __ldcs(wrow + lane + 32 * u);
  kc::PdlWait();
  kc::PdlLaunchDependents();
  if (col >= n) return;
  float acc = 0.0f;
  for (int b = 0; b < batches; ++b) {
    uint4 nxt[U];
    const int base = (b + 1) * 32 * U + lane;
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < U; ++u) nxt[u] = kStream ? LoadStream(wrow + base + 32 * u) : __ldcs(wrow + base + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc += Dot8(cur[u], __ldg(xv + b * 32 * U + lane + 32 * u));
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < U; ++u) cur[u] = nxt[u];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[col] = __float2bfloat16(acc);
}

template <int U, bool kStream>
void RunPipelined(const bf16* x, const bf16* w, int k, int n, bf16* out, cudaStream_t s) {
  CHECK(kc::LaunchPdl(g_launch, GemvPipelined<U, kStream>, dim3((n + 7) / 8), dim3(256), 0, s, x, w, k, n, out));
}

template <int U>
void RunPersistent(const bf16* x, const bf16* w, int k, int n, bf16* out, int blocks,
                   cudaStream_t s) {
  CHECK(kc::LaunchPdl(g_launch, GemvPersistent<U>, dim3(blocks), dim3(256), 0, s, x, w, k, n, out));
}

// WPC warps share one weight row (interleaved 512-byte chunks), each software-pipelined
// with U loads per batch; partial sums meet in shared memory. Shorter chains per warp for
// long rows, more warps for few rows.
template <int WPC, int U>
__global__ void __launch_bounds__(256) GemvSplit(const bf16* __restrict__ x,
                                                const bf16* __restrict__ w, int k, int n,
                                                bf16* out) {
  __shared__ float partial[8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * (8 / WPC) + warp / WPC;
  const int sub = warp % WPC;
  const int vecs = k / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const uint4* wrow = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(col < n ? col : 0) * k);
  const int stride = 32 * WPC;          // between one warp's consecutive loads
  const int per_batch = stride * U;
  const int batches = vecs / per_batch;
  const int base0 = sub * 32 + lane;
  uint4 cur[U];
#pragma unroll
  for (int u = 0; u < U; ++u) cur[u] = __ldcs(wrow + base0 + stride * u);
  kc::PdlWait();
  kc::PdlLaunchDependents();
  float acc = 0.0f;
  for (int b = 0; b < batches; ++b) {
    uint4 nxt[U];
    const int at = b * per_batch + base0;
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < U; ++u) nxt[u] = __ldcs(wrow + at + per_batch + stride * u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc += Dot8(cur[u], __ldg(xv + at + stride * u));
    if (b + 1 < batches) {
#pragma unroll
      for (int u = 0; u < U; ++u) cur[u] = nxt[u];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) partial[warp] = acc;
  __syncthreads();
  if (sub == 0 && lane == 0 && col < n) {
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < WPC; ++j) t += partial[warp + j];
    out[col] = __float2bfloat16(t);
  }
}

template <int WPC, int U>
void RunSplit(const bf16* x, const bf16* w, int k, int n, bf16* out, cudaStream_t s) {
  const int cols_per_cta = 8 / WPC;
  CHECK(kc::LaunchPdl(g_launch, GemvSplit<WPC, U>, dim3((n + cols_per_cta - 1) / cols_per_cta), dim3(256), 0, s, x, w, k, n, out));
}

int main() {
  CHECK(kc::PrepareStreamGemv());
  const int h = 4096, inter = 14336, qkv = 6144, vocab = 128256, layers = 32;
  struct Layer {
    bf16 *qkv, *o, *gate_up, *down;
  };
  std::vector<Layer> L(layers);
  auto alloc_bf16 = [](size_t n) {
    bf16* p = nullptr;
    CHECK(cudaMalloc(&p, n * 2));
    CHECK(kc::FillRandom(p, n, n, 0.0f, 0.02f, nullptr));
    return p;
  };
  for (auto& l : L) {
    l.qkv = alloc_bf16(size_t(qkv) * h);
    l.o = alloc_bf16(size_t(h) * h);
    l.gate_up = alloc_bf16(size_t(2) * inter * h);
    l.down = alloc_bf16(size_t(h) * inter);
  }
  bf16* lm = alloc_bf16(size_t(vocab) * h);
  float *residual, *norm_w, *logits;
  bf16 *normed, *wide, *act, *proj;
  int32_t* ids;
  CHECK(cudaMalloc(&residual, h * 4));
  CHECK(cudaMalloc(&norm_w, h * 4));
  CHECK(cudaMalloc(&logits, size_t(vocab) * 4));
  CHECK(cudaMalloc(&ids, 4));
  void* argmax_scratch = nullptr;
  CHECK(cudaMalloc(&argmax_scratch, kc::ArgmaxScratchBytes(64)));
  CHECK(kc::FillRandom<float>(residual, h, 3, 0.0f, 1.0f, nullptr));
  CHECK(kc::FillRandom<float>(norm_w, h, 4, 1.0f, 0.1f, nullptr));
  normed = alloc_bf16(h);
  wide = alloc_bf16(2 * inter);
  act = alloc_bf16(inter);
  proj = alloc_bf16(h);
  CHECK(cudaDeviceSynchronize());
  const double weight_bytes =
      double(layers) * 2 * (double(qkv) * h + double(h) * h + 2.0 * inter * h + double(h) * inter) +
      2.0 * vocab * h;

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto step = [&]() {
    for (int i = 0; i < layers; ++i) {
      CHECK(kc::AddRmsNorm(residual, i == 0 ? nullptr : proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
      CHECK(Gemv(normed, L[i].qkv, 1, h, qkv, wide, false, s));
      CHECK(Gemv(wide, L[i].o, 1, h, h, proj, false, s));  // stands in for attention out
      CHECK(kc::AddRmsNorm(residual, proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
      CHECK(Gemv(normed, L[i].gate_up, 1, h, 2 * inter, wide, false, s));
      CHECK(kc::GatedMul(wide, 1, inter, kc::GateActivation::kSilu, act, s, g_launch));
      CHECK(Gemv(act, L[i].down, 1, inter, h, proj, false, s));
    }
    CHECK(kc::AddRmsNorm(residual, proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
    CHECK(Gemv(normed, lm, 1, h, vocab, logits, true, s));
    CHECK(kc::ArgmaxRows(logits, 1, vocab, argmax_scratch, ids, s, g_launch));
  };
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time = [&](auto&& fn, const char* name) {
    std::vector<float> ms;
    for (int i = 0; i < 25; ++i) {
      CHECK(cudaEventRecord(a, s));
      fn();
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (i >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const float med = ms[ms.size() / 2];
    std::printf("%-34s %7.3f ms/step  %6.2f TB/s weights  (pdl %s)\n", name, med,
                weight_bytes / (med * 1e-3) / 1e12, g_launch.pdl ? "on" : "off");
  };
  auto step_split = [&]() {
    for (int i = 0; i < layers; ++i) {
      CHECK(kc::AddRmsNorm(residual, i == 0 ? nullptr : proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
      RunSplit<2, 2>(normed, L[i].qkv, h, qkv, wide, s);
      RunSplit<2, 2>(wide, L[i].o, h, h, proj, s);
      CHECK(kc::AddRmsNorm(residual, proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
      CHECK(kc::GemvSmallRows(normed, L[i].gate_up, 1, h, 2 * inter, wide, false, s, g_launch));
      CHECK(kc::GatedMul(wide, 1, inter, kc::GateActivation::kSilu, act, s, g_launch));
      RunSplit<4, 2>(act, L[i].down, inter, h, proj, s);
    }
    CHECK(kc::AddRmsNorm(residual, proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
    CHECK(kc::GemvSmallRows(normed, lm, 1, h, vocab, logits, true, s, g_launch));
    CHECK(kc::ArgmaxRows(logits, 1, vocab, argmax_scratch, ids, s, g_launch));
  };
  {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    step_split();
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    time([&] { CHECK(cudaGraphLaunch(e, s)); }, "chain graph, split GEMVs");
  }
  time(step, "chain eager");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  step();
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  time([&] { CHECK(cudaGraphLaunch(exec, s)); }, "chain graph");
  g_stream = true;
  time(step, "chain eager, stream GEMV");
  {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    step();
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    time([&] { CHECK(cudaGraphLaunch(e, s)); }, "chain graph, stream GEMV");
  }
  g_stream = false;
  std::printf("limit at 4.17 TB/s: %.3f ms/step\n", weight_bytes / 4.17e12 * 1e3);

  // The same chain for 64 rows (W2's decode batch) on cuBLAS, as cuda::Projections::Gemm runs it.
  if (std::getenv("CHAIN64") != nullptr) {
    const int R = 64;
    float* res64;
    bf16 *normed64, *wide64, *act64, *proj64;
    float* logits64;
    int32_t* ids64;
    CHECK(cudaMalloc(&res64, size_t(R) * h * 4));
    CHECK(cudaMalloc(&logits64, size_t(R) * vocab * 4));
    CHECK(cudaMalloc(&ids64, R * 4));
    CHECK(kc::FillRandom<float>(res64, size_t(R) * h, 5, 0.0f, 1.0f, nullptr));
    normed64 = alloc_bf16(size_t(R) * h);
    wide64 = alloc_bf16(size_t(R) * 2 * inter);
    act64 = alloc_bf16(size_t(R) * inter);
    proj64 = alloc_bf16(size_t(R) * h);
    cublasHandle_t cublas;
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return 1;
    void* cublas_ws;
    CHECK(cudaMalloc(&cublas_ws, 32 << 20));
    cublasSetWorkspace(cublas, cublas_ws, 32 << 20);
    cublasSetStream(cublas, s);
    auto gemm = [&](const bf16* x, const bf16* w, int k, int n, void* out, bool f32) {
      const float alpha = 1.0f, beta = 0.0f;
      if (cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, R, k, &alpha, w, CUDA_R_16BF, k, x,
                       CUDA_R_16BF, k, &beta, out, f32 ? CUDA_R_32F : CUDA_R_16BF, n,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
        std::printf("cublas failed\n");
        std::exit(1);
      }
    };
    auto step64 = [&]() {
      for (int i = 0; i < layers; ++i) {
        CHECK(kc::AddRmsNorm(res64, i == 0 ? nullptr : proj64, norm_w, nullptr, R, h, 1e-5f, normed64, s, g_launch));
        gemm(normed64, L[i].qkv, h, qkv, wide64, false);
        gemm(wide64, L[i].o, h, h, proj64, false);
        CHECK(kc::AddRmsNorm(res64, proj64, norm_w, nullptr, R, h, 1e-5f, normed64, s, g_launch));
        gemm(normed64, L[i].gate_up, h, 2 * inter, wide64, false);
        CHECK(kc::GatedMul(wide64, R, inter, kc::GateActivation::kSilu, act64, s, g_launch));
        gemm(act64, L[i].down, inter, h, proj64, false);
      }
      CHECK(kc::AddRmsNorm(res64, proj64, norm_w, nullptr, R, h, 1e-5f, normed64, s, g_launch));
      gemm(normed64, lm, h, vocab, logits64, true);
      CHECK(kc::ArgmaxRows(logits64, R, vocab, argmax_scratch, ids64, s, g_launch));
    };
    time(step64, "chain64 eager (cuBLAS)");
    cudaGraph_t g64;
    cudaGraphExec_t e64;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    step64();
    CHECK(cudaStreamEndCapture(s, &g64));
    CHECK(cudaGraphInstantiate(&e64, g64, 0));
    time([&] { CHECK(cudaGraphLaunch(e64, s)); }, "chain64 graph (cuBLAS)");
    struct Shape64 {
      const char* name;
      int n, k;
    } shapes64[] = {{"qkv", qkv, h}, {"o", h, h}, {"gate_up", 2 * inter, h}, {"down", h, inter}};
    for (const Shape64& sh : shapes64) {
      std::vector<float> ms;
      for (int i = 0; i < 70; ++i) {
        const Layer& l = L[i % layers];
        const bf16* w = sh.n == qkv ? l.qkv : sh.n == 2 * inter ? l.gate_up : sh.k == inter ? l.down : l.o;
        CHECK(cudaEventRecord(a, s));
        gemm(wide64, w, sh.k, sh.n, proj64, false);
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, a, b));
        if (i >= 6) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const float med = ms[ms.size() / 2];
      std::printf("  %-8s cuBLAS 64 rows        %8.1f us %6.2f TB/s\n", sh.name, med * 1e3,
                  2.0 * sh.n * sh.k / (med * 1e-3) / 1e12);
    }
  }

  // Each shape alone, weights rotated over the 32 layers (from HBM, as in a step).
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  struct Shape {
    const char* name;
    int n, k;
    int which;
  } shapes[] = {{"qkv", qkv, h, 0}, {"o", h, h, 1}, {"gate_up", 2 * inter, h, 2}, {"down", h, inter, 3}};
  auto weights = [&](int which, int layer) {
    const Layer& l = L[layer];
    return which == 0 ? l.qkv : which == 1 ? l.o : which == 2 ? l.gate_up : l.down;
  };
  auto time_shape = [&](const Shape& sh, const char* label, auto&& launch) {
    std::vector<float> ms;
    for (int i = 0; i < 70; ++i) {
      CHECK(cudaEventRecord(a, s));
      launch(weights(sh.which, i % layers));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (i >= 6) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const float med = ms[ms.size() / 2];
    std::printf("  %-8s %-22s %8.1f us %6.2f TB/s\n", sh.name, label, med * 1e3,
                2.0 * sh.n * sh.k / (med * 1e-3) / 1e12);
  };
  for (const Shape& sh : shapes) {
    time_shape(sh, "current", [&](const bf16* w) {
      CHECK(kc::GemvSmallRows(wide, w, 1, sh.k, sh.n, proj, false, s, g_launch));
    });
    time_shape(sh, "stream (bulk copies)", [&](const bf16* w) {
      CHECK(kc::StreamGemv(wide, w, 1, sh.k, sh.n, proj, false, s));
    });
    time_shape(sh, "split 2 warps U2", [&](const bf16* w) { RunSplit<2, 2>(wide, w, sh.k, sh.n, proj, s); });
    time_shape(sh, "split 2 warps U4", [&](const bf16* w) { RunSplit<2, 4>(wide, w, sh.k, sh.n, proj, s); });
    time_shape(sh, "split 4 warps U2", [&](const bf16* w) { RunSplit<4, 2>(wide, w, sh.k, sh.n, proj, s); });
    time_shape(sh, "split 4 warps U1", [&](const bf16* w) { RunSplit<4, 1>(wide, w, sh.k, sh.n, proj, s); });
    time_shape(sh, "split 8 warps U1", [&](const bf16* w) { RunSplit<8, 1>(wide, w, sh.k, sh.n, proj, s); });
  }
  return 0;
}
