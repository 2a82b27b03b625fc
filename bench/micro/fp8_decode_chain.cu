// Micro-benchmark of the W1 decode step with fp8 (E4M3) weights, without attention: 32 layers
// of (RMSNorm, GEMV qkv, GEMV o, RMSNorm, GEMV gate|up + SiLU, GEMV down) over per-channel
// fp8 codes (QuantizeRowsFp8 of random bf16 weights, so the code mix is the library's), then
// RMSNorm, the bf16 lm_head GEMV and the argmax, Llama-3-8B shapes, replayed as a CUDA graph
// with programmatic dependent launch (as the engine's decode step).
//
// Answers where an fp8 step's time goes against its bytes:
//  - the whole chain, and the chain with one kind of kernel left out (the difference is what
//    that kind costs inside the chain, PDL overlap included);
//  - each projection alone (weights rotated over the 32 layers, so from HBM);
//  - the same for GEMV variants (weight rows per warp, pieces before the PDL wait, pieces
//    per pipelined batch), whole chain included, to pick the library's kernel by measurement;
//  - W8's decode attention at 131k positions (fp8 and bf16 KV) for several split counts;
//  - every GEMV variant against a host reference on the same codes (exit status 2 if not).
//
// Build (here): nvcc -O3 -std=c++17 -arch=sm_90 -Isrc --expt-relaxed-constexpr \
//   bench/micro/fp8_decode_chain.cu src/backend/cuda/fp8_kernels.cu src/backend/cuda/gemv.cu \
//   src/backend/cuda/kernels.cu src/backend/cuda/decode_attention.cu -o fp8_decode_chain
// FP8_CHAIN_NO_ATTENTION=1 skips the 131k decode-attention timings (W8's attention).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/decode_attention.h"
#include "backend/cuda/fp8_gemv_rows.cuh"
#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.h"
#include "common/fp8_e4m3.h"
#include "launch_env.h"
#include "cuda_check.h"

using kvtier::cuda::bf16;
namespace kc = kvtier::cuda;

static const kvtier::CudaLaunchOptions g_launch = LaunchOptionsFromEnv();

// One GEMV implementation of the chain: plain projection and gate|up + SiLU, one row.
struct GemvImpl {
  std::string name;
  std::function<cudaError_t(const bf16* x, const uint8_t* codes, const float* scales, int k, int n, bf16* out,
                            cudaStream_t s)>
      gemv;
  std::function<cudaError_t(const bf16* x, const uint8_t* codes, const float* scales, int k, int inter,
                            bf16* out, cudaStream_t s)>
      silu;
};

template <int RW, int P, int U>
GemvImpl RowsImpl() {
  char name[64];
  std::snprintf(name, sizeof(name), "rows/warp %d pre %d unroll %d", RW, P, U);
  GemvImpl impl;
  impl.name = name;
  impl.gemv = [](const bf16* x, const uint8_t* c, const float* sc, int k, int n, bf16* out, cudaStream_t s) {
    return kc::LaunchGemvFp8Rows<bf16, RW, P, U, false>(x, c, sc, k, n, out, s, g_launch);
  };
  impl.silu = [](const bf16* x, const uint8_t* c, const float* sc, int k, int inter, bf16* out, cudaStream_t s) {
    return kc::LaunchGemvFp8Rows<bf16, RW, P, U, true>(x, c, sc, k, inter, out, s, g_launch);
  };
  return impl;
}

// An fp8 KV pool of `blocks` blocks of block_bytes: codes without NaN (bits 3 and 7
// cleared: |code| <= 0x77) and row scales 0.01.
__global__ void SanitizeFp8Pool(uint8_t* pool, int64_t bytes, int64_t block_bytes, int64_t code_bytes) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < bytes; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t off = i % block_bytes;
    if (off < code_bytes) {
      pool[i] &= 0x77;
    } else if ((off - code_bytes) % 4 == 0) {
      *reinterpret_cast<float*>(pool + i) = 0.01f;
    }
  }
}

int main() {
  const int h = 4096, inter = 14336, qkv = 6144, vocab = 128256, layers = 32;
  struct Layer {
    uint8_t *qkv, *o, *gate_up, *down;
    float *s_qkv, *s_o, *s_gate_up, *s_down;
  };
  std::vector<Layer> L(layers);
  bf16* staging = nullptr;
  CHECK(cudaMalloc(&staging, size_t(2) * inter * h * 2));
  uint64_t seed = 11;
  auto quantized = [&](int rows, int cols, uint8_t** codes, float** scales) {
    CHECK(cudaMalloc(codes, size_t(rows) * cols));
    CHECK(cudaMalloc(scales, size_t(rows) * 4));
    CHECK(kc::FillRandom(staging, int64_t(rows) * cols, seed++, 0.0f, 0.02f, nullptr));
    CHECK(kc::QuantizeRowsFp8(staging, rows, cols, *codes, *scales, nullptr));
  };
  for (auto& l : L) {
    quantized(qkv, h, &l.qkv, &l.s_qkv);
    quantized(h, h, &l.o, &l.s_o);
    quantized(2 * inter, h, &l.gate_up, &l.s_gate_up);
    quantized(h, inter, &l.down, &l.s_down);
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(staging));
  auto alloc_bf16 = [](size_t n, uint64_t s) {
    bf16* p = nullptr;
    CHECK(cudaMalloc(&p, n * 2));
    CHECK(kc::FillRandom(p, n, s, 0.0f, 0.02f, nullptr));
    return p;
  };
  bf16* lm = alloc_bf16(size_t(vocab) * h, 99);
  float *residual, *norm_w, *logits;
  int32_t* ids;
  CHECK(cudaMalloc(&residual, h * 4));
  CHECK(cudaMalloc(&norm_w, h * 4));
  CHECK(cudaMalloc(&logits, size_t(vocab) * 4));
  CHECK(cudaMalloc(&ids, 4));
  void* argmax_scratch = nullptr;
  CHECK(cudaMalloc(&argmax_scratch, kc::ArgmaxScratchBytes(64)));
  CHECK(kc::FillRandom<float>(residual, h, 3, 0.0f, 1.0f, nullptr));
  CHECK(kc::FillRandom<float>(norm_w, h, 4, 1.0f, 0.1f, nullptr));
  bf16* normed = alloc_bf16(h, 5);
  bf16* wide = alloc_bf16(2 * inter, 6);
  bf16* act = alloc_bf16(inter, 7);
  bf16* proj = alloc_bf16(h, 8);
  CHECK(cudaDeviceSynchronize());
  const double proj_bytes = double(layers) * (double(qkv) * h + double(h) * h + 2.0 * inter * h + double(h) * inter);
  const double lm_bytes = 2.0 * vocab * h;
  const double weight_bytes = proj_bytes + lm_bytes;

  GemvImpl library;
  library.name = "library GemvFp8 (2/2/2)";
  library.gemv = [](const bf16* x, const uint8_t* c, const float* sc, int k, int n, bf16* out, cudaStream_t s) {
    return kc::GemvFp8(x, 1, c, sc, n, k, out, s, g_launch);
  };
  library.silu = [](const bf16* x, const uint8_t* c, const float* sc, int k, int inter, bf16* out, cudaStream_t s) {
    return kc::GemvGatedMulFp8(x, 1, c, sc, inter, k, kc::GateActivation::kSilu, out, s, g_launch);
  };
  std::vector<GemvImpl> impls = {library,
                                 RowsImpl<1, 4, 2>(),
                                 RowsImpl<1, 8, 2>(),
                                 RowsImpl<2, 4, 2>(),
                                 RowsImpl<2, 2, 1>(),
                                 RowsImpl<4, 1, 1>()};

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  enum Skip { kNone = 0, kNorms = 1, kQkv = 2, kO = 4, kGateUp = 8, kDown = 16, kLmHead = 32, kArgmax = 64 };
  auto step = [&](const GemvImpl& g, int skip) {
    for (int i = 0; i < layers; ++i) {
      const Layer& l = L[i];
      if (!(skip & kNorms))
        CHECK(kc::AddRmsNorm(residual, i == 0 ? nullptr : proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
      if (!(skip & kQkv)) CHECK(g.gemv(normed, l.qkv, l.s_qkv, h, qkv, wide, s));
      if (!(skip & kO)) CHECK(g.gemv(wide, l.o, l.s_o, h, h, proj, s));  // stands in for attention out
      if (!(skip & kNorms)) CHECK(kc::AddRmsNorm(residual, proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
      if (!(skip & kGateUp)) CHECK(g.silu(normed, l.gate_up, l.s_gate_up, h, inter, act, s));
      if (!(skip & kDown)) CHECK(g.gemv(act, l.down, l.s_down, inter, h, proj, s));
    }
    if (!(skip & kNorms)) CHECK(kc::AddRmsNorm(residual, proj, norm_w, nullptr, 1, h, 1e-5f, normed, s, g_launch));
    if (!(skip & kLmHead)) CHECK(kc::GemvSmallRows(normed, lm, 1, h, vocab, logits, true, s, g_launch));
    if (!(skip & kArgmax)) CHECK(kc::ArgmaxRows(logits, 1, vocab, argmax_scratch, ids, s, g_launch));
  };
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto median_ms = [&](auto&& fn, int reps, int warm) {
    std::vector<float> ms;
    for (int i = 0; i < reps + warm; ++i) {
      CHECK(cudaEventRecord(a, s));
      fn(i);
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (i >= warm) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  auto graph_ms = [&](const GemvImpl& g, int skip) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    step(g, skip);
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const float ms = median_ms([&](int) { CHECK(cudaGraphLaunch(exec, s)); }, 20, 3);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    return ms;
  };
  std::printf("fp8 W1 chain: %.3f GB projections (fp8) + %.3f GB lm_head (bf16); pdl %s\n", proj_bytes / 1e9,
              lm_bytes / 1e9, g_launch.pdl ? "on" : "off");
  std::printf("limit at 4.17 TB/s: %.3f ms/step\n", weight_bytes / 4.17e12 * 1e3);

  // Where the time goes: the chain with one kind of kernel left out.
  const float full = graph_ms(library, kNone);
  std::printf("[chain] %-28s %7.3f ms/step  %5.2f TB/s of weights  %6.1f steps/s\n", "library, all kernels", full,
              weight_bytes / (full * 1e-3) / 1e12, 1e3 / full);
  struct Part {
    const char* name;
    int skip;
    double bytes;
  } parts[] = {{"norms (65)", kNorms, 0},
               {"qkv GEMVs (32)", kQkv, layers * double(qkv) * h},
               {"o GEMVs (32)", kO, layers * double(h) * h},
               {"gate|up+SiLU GEMVs (32)", kGateUp, layers * 2.0 * inter * h},
               {"down GEMVs (32)", kDown, layers * double(h) * inter},
               {"lm_head GEMV (bf16)", kLmHead, lm_bytes},
               {"argmax", kArgmax, 0}};
  for (const Part& p : parts) {
    const float without = graph_ms(library, p.skip);
    const float cost = full - without;
    std::printf("[part]  %-28s costs %7.3f ms in the chain", p.name, cost);
    if (p.bytes > 0) std::printf(" (%.3f ms at 4.17 TB/s, %5.2f TB/s)", p.bytes / 4.17e12 * 1e3, p.bytes / (cost * 1e-3) / 1e12);
    std::printf("\n");
  }
  const float gemv_only = graph_ms(library, kNorms | kLmHead | kArgmax);
  std::printf("[part]  %-28s %7.3f ms (%5.2f TB/s)\n", "fp8 GEMVs alone, chained", gemv_only,
              proj_bytes / (gemv_only * 1e-3) / 1e12);

  // Each variant: whole chain, then each shape alone.
  struct Shape {
    const char* name;
    int n, k;
    int which;
  } shapes[] = {{"qkv", qkv, h, 0}, {"o", h, h, 1}, {"gate_up", inter, h, 2}, {"down", h, inter, 3}};
  for (const GemvImpl& g : impls) {
    const float ms = graph_ms(g, kNone);
    std::printf("[chain] %-28s %7.3f ms/step  %5.2f TB/s of weights  %6.1f steps/s\n", g.name.c_str(), ms,
                weight_bytes / (ms * 1e-3) / 1e12, 1e3 / ms);
    for (const Shape& sh : shapes) {
      const float t = median_ms(
          [&](int i) {
            const Layer& l = L[i % layers];
            switch (sh.which) {
              case 0: CHECK(g.gemv(normed, l.qkv, l.s_qkv, h, qkv, wide, s)); break;
              case 1: CHECK(g.gemv(wide, l.o, l.s_o, h, h, proj, s)); break;
              case 2: CHECK(g.silu(normed, l.gate_up, l.s_gate_up, h, inter, act, s)); break;
              default: CHECK(g.gemv(act, l.down, l.s_down, inter, h, proj, s)); break;
            }
          },
          64, 6);
      const double bytes = sh.which == 2 ? 2.0 * inter * h : double(sh.n) * sh.k;
      std::printf("[shape] %-28s %-8s %7.1f us %5.2f TB/s\n", g.name.c_str(), sh.name, t * 1e3,
                  bytes / (t * 1e-3) / 1e12);
    }
  }
  // The bf16 lm_head alone (1.05 GB).
  const float lm_ms =
      median_ms([&](int) { CHECK(kc::GemvSmallRows(normed, lm, 1, h, vocab, logits, true, s, g_launch)); }, 20, 3);
  std::printf("[shape] %-28s %-8s %7.1f us %5.2f TB/s\n", "bf16 GemvSmallRows", "lm_head", lm_ms * 1e3,
              lm_bytes / (lm_ms * 1e-3) / 1e12);

  // W8's decode attention: one row at 131,072 positions of context, Llama-3-8B's KV shape
  // (8 kv heads, head_dim 128, 16-token blocks), fp8 and bf16 KV, per layer, for several
  // max_splits (the library picks DecodeMaxSplits: one wave of 3 CTAs per SM).
  if (std::getenv("FP8_CHAIN_NO_ATTENTION") == nullptr) {
    const int ctx = 131072, bt = 16, kvh = 8, hd = 128, heads = 32;
    const int64_t blocks = ctx / bt;
    const int64_t elems = int64_t(layers) * 2 * kvh * bt * hd;  // per block
    const int64_t fp8_block_bytes = elems + elems / hd * 4;
    void* pool = nullptr;
    CHECK(cudaMalloc(&pool, size_t(blocks) * elems * 2));
    CHECK(kc::FillRandom(static_cast<bf16*>(pool), blocks * elems, 77, 0.0f, 1.0f, nullptr));
    std::vector<int32_t> table(blocks), indptr = {0, int32_t(blocks)}, zero = {0}, pos = {ctx - 1};
    for (int64_t i = 0; i < blocks; ++i) table[i] = int32_t((i * 7919) % blocks);  // scattered blocks
    int32_t *d_table, *d_indptr, *d_zero, *d_pos;
    CHECK(cudaMalloc(&d_table, blocks * 4));
    CHECK(cudaMalloc(&d_indptr, 8));
    CHECK(cudaMalloc(&d_zero, 4));
    CHECK(cudaMalloc(&d_pos, 4));
    CHECK(cudaMemcpy(d_table, table.data(), blocks * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_indptr, indptr.data(), 8, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_zero, zero.data(), 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_pos, pos.data(), 4, cudaMemcpyHostToDevice));
    bf16* q = alloc_bf16(heads * hd, 78);
    bf16* o = alloc_bf16(heads * hd, 79);
    float *po, *pml;
    uint32_t* counters;
    CHECK(cudaMalloc(&po, kc::DecodePartialFloats(1, kc::kDecodeMaxSplitsLimit, heads, hd) * 4));
    CHECK(cudaMalloc(&pml, kc::DecodePartialMlFloats(1, kc::kDecodeMaxSplitsLimit, heads) * 4));
    CHECK(cudaMalloc(&counters, kc::DecodeCounterInts(1, kvh) * 4));
    CHECK(cudaMemset(counters, 0, kc::DecodeCounterInts(1, kvh) * 4));
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int lib_splits = kc::DecodeMaxSplits(1, kvh, sms);
    kc::StepTokens tok{d_zero, d_pos, 1};
    SanitizeFp8Pool<<<4096, 256, 0, s>>>(static_cast<uint8_t*>(pool), blocks * fp8_block_bytes, fp8_block_bytes, elems);
    CHECK(cudaGetLastError());
    for (bool fp8 : {true, false}) {
      kc::PagedKv<bf16> kv;
      kv.pool = static_cast<bf16*>(pool);
      kv.indices = d_table;
      kv.indptr = d_indptr;
      kv.block_elements = elems;
      kv.num_kv_heads = kvh;
      kv.head_dim = hd;
      kv.block_tokens = bt;
      kv.fp8 = fp8;
      kv.block_bytes = fp8 ? fp8_block_bytes : 0;
      const double bytes = double(ctx) * kvh * 2 * (fp8 ? hd + 4 : 2 * hd);  // one layer
      for (int fold : {0, 1}) {
      if (!fp8 && fold) continue;
      for (int splits : {lib_splits, 16, 32, 64, 96, 128}) {
        kc::DecodeAttentionParams<bf16> p;
        p.fp8_scales_after_products = fold;
        p.q = q;
        p.out = o;
        p.rows = d_zero;
        p.num_rows = 1;
        p.num_heads = heads;
        p.max_splits = splits;
        p.partial_out = po;
        p.partial_ml = pml;
        p.split_counters = counters;
        // 8 layers back to back per timing (as in a step: PDL overlap between them).
        const float ms = median_ms(
            [&](int i) {
              for (int j = 0; j < 8; ++j) {
                p.layer = (8 * i + j) % layers;
                CHECK(kc::DecodeAttention(p, tok, kv, s, g_launch));
              }
            },
            20, 3);
        const double per_layer_us = ms * 1e3 / 8;
        std::printf("[attn]  %s KV ctx %d max_splits %3d%s %7.1f us/layer %5.2f TB/s (x32 layers: %.3f ms)\n",
                    fp8 ? (fold ? "fp8 scales after products" : "fp8 dequantize first    ") : "bf16                     ",
                    ctx, splits, splits == lib_splits ? " (library)" : "          ", per_layer_us,
                    bytes / (per_layer_us * 1e-6) / 1e12, per_layer_us * 32 / 1e3);
      }
      }
      if (fp8) {
        // The two fp8 forms on the same bytes (layer 3): max |diff| relative to max |out|.
        std::vector<std::vector<uint16_t>> outs;
        for (int fold : {0, 1}) {
          kc::DecodeAttentionParams<bf16> p;
          p.fp8_scales_after_products = fold;
          p.q = q;
          p.out = o;
          p.rows = d_zero;
          p.num_rows = 1;
          p.num_heads = heads;
          p.max_splits = lib_splits;
          p.partial_out = po;
          p.partial_ml = pml;
          p.split_counters = counters;
          p.layer = 3;
          CHECK(kc::DecodeAttention(p, tok, kv, s, g_launch));
          CHECK(cudaStreamSynchronize(s));
          outs.emplace_back(heads * hd);
          CHECK(cudaMemcpy(outs.back().data(), o, heads * hd * 2, cudaMemcpyDeviceToHost));
        }
        auto to_f = [](uint16_t v) {
          uint32_t bits = uint32_t(v) << 16;
          float f;
          std::memcpy(&f, &bits, 4);
          return f;
        };
        float max_diff = 0, max_out = 0;
        int nan = 0;
        for (int i = 0; i < heads * hd; ++i) {
          const float a = to_f(outs[0][i]), b = to_f(outs[1][i]);
          nan += std::isnan(a) || std::isnan(b);
          max_diff = std::max(max_diff, std::fabs(a - b));
          max_out = std::max(max_out, std::fabs(a));
        }
        std::printf("[attn]  fp8 forms agree: max |diff| %.3g of max |out| %.3g, %d NaN\n", max_diff, max_out, nan);
      }
    }
    CHECK(cudaFree(pool));
  }

  // Correctness of every variant against a host reference on the same codes (double sums),
  // bound as kvtier_cuda_fp8_test's: bf16 output rounding + 1e-5 of the terms' magnitude.
  // Shapes: down (k 14336), o cut to 333 rows (a ragged last warp) and gate|up + SiLU.
  {
    auto to_f = [](uint16_t v) {
      uint32_t bits = uint32_t(v) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    };
    auto host = [&](const void* p, size_t bytes) {
      std::vector<uint8_t> v(bytes);
      CHECK(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost));
      return v;
    };
    struct Case {
      const char* name;
      const bf16* x;
      const uint8_t* codes;
      const float* scales;
      int k, n;
      bool silu;
    } cases[] = {{"down", act, L[1].down, L[1].s_down, inter, h, false},
                 {"o 333 rows", normed, L[2].o, L[2].s_o, h, 333, false},
                 {"gate_up+silu", normed, L[3].gate_up, L[3].s_gate_up, h, inter, true}};
    int failures = 0;
    for (const Case& c : cases) {
      const int code_rows = c.silu ? 2 * c.n : c.n;
      std::vector<uint8_t> xb = host(c.x, size_t(c.k) * 2), cb = host(c.codes, size_t(code_rows) * c.k),
                           sb = host(c.scales, size_t(code_rows) * 4);
      std::vector<float> xf(c.k), sf(code_rows);
      for (int i = 0; i < c.k; ++i) xf[i] = to_f(reinterpret_cast<const uint16_t*>(xb.data())[i]);
      std::memcpy(sf.data(), sb.data(), sf.size() * 4);
      std::vector<double> dot(code_rows), mag(code_rows);
      for (int r = 0; r < code_rows; ++r) {
        double d = 0, m = 0;
        for (int i = 0; i < c.k; ++i) {
          const double t = double(xf[i]) * kvtier::Fp8E4M3ToFloat(cb[size_t(r) * c.k + i]) * sf[r];
          d += t;
          m += std::fabs(t);
        }
        dot[r] = d;
        mag[r] = m;
      }
      for (const GemvImpl& g : impls) {
        CHECK(cudaMemset(wide, 0xff, size_t(c.n) * 2));
        CHECK(c.silu ? g.silu(c.x, c.codes, c.scales, c.k, c.n, wide, s) : g.gemv(c.x, c.codes, c.scales, c.k, c.n, wide, s));
        CHECK(cudaStreamSynchronize(s));
        std::vector<uint8_t> ob = host(wide, size_t(c.n) * 2);
        int bad = 0;
        double worst = 0;
        for (int r = 0; r < c.n; ++r) {
          const double got = to_f(reinterpret_cast<const uint16_t*>(ob.data())[r]);
          double want, bound;
          if (c.silu) {
            const double gd = dot[r], ud = dot[c.n + r];
            want = gd / (1.0 + std::exp(-gd)) * ud;
            bound = 1e-2 * std::fabs(want) + 1e-5 * (1.1 * std::fabs(ud) * mag[r] + std::fabs(gd) * mag[c.n + r]) + 1e-6;
          } else {
            want = dot[r];
            bound = 1e-2 * std::fabs(want) + 1e-5 * mag[r];
          }
          const double err = std::fabs(got - want);
          if (!(err <= bound)) ++bad;
          worst = std::max(worst, err / bound);
        }
        failures += bad > 0;
        std::printf("[check] %-28s %-13s %s (%d of %d outside the bound; worst error %.3f of it)\n", g.name.c_str(),
                    c.name, bad == 0 ? "PASS" : "FAIL", bad, c.n, worst);
      }
    }
    std::printf("[check] %s\n", failures == 0 ? "all PASS" : "FAILURES");
    if (failures != 0) return 2;
  }
  return 0;
}
