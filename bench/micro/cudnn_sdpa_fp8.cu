// Whether cuDNN's fused attention takes kvtier's prefill chunk with fp8 (E4M3) Q, K and V, and
// how fast against the bf16 graph the library runs today: causal, GQA (32 query heads over 8
// K/V heads), head_dim 128, in the form cudnn-frontend's sdpa_fp8 node emits
// (cudnn_graph.h BuildCausalAttentionGraphFp8: per-tensor descales of Q, K and V, the
// probabilities scaled into E4M3 for the second matmul, amax outputs).
//
// With no argument: every form (mask: padded bottom-right as the library's bf16 plans, bottom-
// right without padding, top-left, none; O in bf16 or E4M3; the softmax stats virtual or in
// memory), build only, with each engine config's status and cuDNN's message. With a form's
// index: that form checked against an fp32 reference on the same (dequantized) values, on small
// shapes and on short chunks over 32k and 128k keys, beside the bf16 graph on the same
// values, then both timed on a prefill chunk of
// 2,048 queries over 2k, 32k and 128k keys, and on 32k x 32k.
//
// The data: bf16 uniform in [-1, 1), quantized to E4M3 with a per-tensor scale of 256 (codes
// up to 256; descale 1/256), and dequantized back (exactly) for the reference and the bf16
// graph, so both graphs see the same values. The probabilities go to E4M3 with scale_s 448
// (descale 1/448); an E4M3 O with scale_o 256.
//
// Build: nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc -Ibench/micro
//          bench/micro/cudnn_sdpa_fp8.cu src/backend/cuda/cudnn_graph.cc -lcudnn -o cudnn_sdpa_fp8
// Run on the GPU machine with torch's cuDNN on the library path (as cudnn_sdpa.cu).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_graph.h"
#include "cuda_check.h"
#include "cudnn_probe.cuh"

namespace {

using kvtier::cuda::AttentionGraphForm;
using kvtier::cuda::AttentionGraphShape;
using kvtier::cuda::AttentionMask;
using kvtier::cuda::CudnnGraphBuilder;
using kvtier::probe::Api;
using kvtier::probe::FillRandom;
using kvtier::probe::ReferenceAttention;
using kvtier::probe::LastCudnnError;
using namespace kvtier::cuda;  // the uids

constexpr float kInputScale = 256.0f;  // codes = value * 256
constexpr float kProbScale = 448.0f;
constexpr float kOutputScale = 256.0f;

struct Fp8Form {
  std::string name;
  AttentionGraphForm form;
  cudnnDataType_t o_type;
};

std::vector<Fp8Form> Forms() {
  static const char* masks[] = {"nomask", "topleft", "offset", "addsub", "padded"};
  std::vector<Fp8Form> forms;
  for (AttentionMask mask :
       {AttentionMask::kPadded, AttentionMask::kAddKeysSubQueries, AttentionMask::kTopLeft, AttentionMask::kNone}) {
    for (bool stats_in_memory : {false, true}) {
      for (cudnnDataType_t o : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FP8_E4M3}) {
        AttentionGraphForm f;
        f.mask = mask;
        f.softmax_stats = true;
        f.stats_in_memory = stats_in_memory;
        forms.push_back({std::string(masks[static_cast<int>(mask)]) + (stats_in_memory ? "/stats-mem" : "/stats") +
                             (o == CUDNN_DATA_BFLOAT16 ? "/obf16" : "/ofp8"),
                         f, o});
      }
    }
  }
  return forms;
}

// codes[i] = E4M3(x[i] * scale); x[i] = decoded code / scale (exact in bf16).
__global__ void QuantizeInPlace(__nv_bfloat16* x, __nv_fp8_e4m3* codes, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const __nv_fp8_e4m3 c(__bfloat162float(x[i]) * scale);
    codes[i] = c;
    x[i] = __float2bfloat16(static_cast<float>(c) / scale);
  }
}

// The device buffers of one shape: bf16 values (dequantized), their E4M3 codes, outputs, and
// the fp8 graph's factors [descale q, k, v, s, scale s, scale o, amax s, amax o].
struct Buffers {
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  __nv_fp8_e4m3 *q8 = nullptr, *k8 = nullptr, *v8 = nullptr;
  void* o8 = nullptr;  // bf16 or E4M3, as the form says
  float* factors = nullptr;
  float* stats = nullptr;
  int32_t* seq_lens = nullptr;
  void* workspace = nullptr;
};

double TimeMs(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack, int iters) {
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  cudnnBackendExecute(handle, plan, pack);
  CHECK(cudaEventRecord(t0));
  for (int i = 0; i < iters; ++i) cudnnBackendExecute(handle, plan, pack);
  CHECK(cudaEventRecord(t1));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  return ms / iters;
}

// Builds the fp8 graph of `f` and the library's bf16 graph on shape s (padded forms: keys
// rounded up to 64), runs both on the same values, checks them against the reference when
// `check`, times both; one RESULT line.
void RunCase(cudnnHandle_t handle, const Fp8Form& f, const AttentionGraphShape& s, bool check) {
  const bool padded = f.form.mask == AttentionMask::kPadded;
  AttentionGraphShape gs = s;
  if (padded) gs.skv = (s.skv + 63) / 64 * 64;
  CudnnGraphBuilder g8(Api(), handle), g16(Api(), handle);
  BuildCausalAttentionGraphFp8(g8, gs, f.form, f.o_type);
  int64_t ws8 = 0, ws16 = 0;
  cudnnBackendDescriptor_t plan8 = g8.ok() ? g8.Plan(&ws8) : nullptr;
  const AttentionGraphForm bf16_form;  // the library's
  AttentionGraphShape gs16 = s;
  gs16.skv = (s.skv + 63) / 64 * 64;
  BuildCausalAttentionGraph(g16, gs16, bf16_form);
  cudnnBackendDescriptor_t plan16 = g16.ok() ? g16.Plan(&ws16) : nullptr;
  std::printf("  %s sq %lld skv %lld: fp8 plan %s, bf16 plan %s\n", f.name.c_str(), static_cast<long long>(s.sq),
              static_cast<long long>(s.skv), plan8 ? "built" : g8.error().c_str(),
              plan16 ? "built" : g16.error().c_str());
  if (plan8 == nullptr) {
    std::printf("%s", g8.plan_log().c_str());
    return;
  }
  Buffers b;
  const int64_t nq = s.sq * s.hq * s.d, nkv = gs16.skv * s.hk * s.d;
  CHECK(cudaMalloc(&b.q, nq * 2));
  CHECK(cudaMalloc(&b.o, nq * 2));
  CHECK(cudaMalloc(&b.k, nkv * 2));
  CHECK(cudaMalloc(&b.v, nkv * 2));
  CHECK(cudaMalloc(&b.q8, nq));
  CHECK(cudaMalloc(&b.k8, nkv));
  CHECK(cudaMalloc(&b.v8, nkv));
  CHECK(cudaMalloc(&b.o8, nq * 2));
  CHECK(cudaMalloc(&b.factors, 8 * sizeof(float)));
  CHECK(cudaMalloc(&b.stats, s.sq * s.hq * sizeof(float)));
  CHECK(cudaMalloc(&b.seq_lens, 2 * sizeof(int32_t)));
  CHECK(cudaMalloc(&b.workspace, std::max<int64_t>(std::max(ws8, ws16), 256)));
  FillRandom<<<1024, 256>>>(b.q, nq, 1);
  FillRandom<<<1024, 256>>>(b.k, nkv, 2);
  FillRandom<<<1024, 256>>>(b.v, nkv, 3);
  QuantizeInPlace<<<1024, 256>>>(b.q, b.q8, nq, kInputScale);
  QuantizeInPlace<<<1024, 256>>>(b.k, b.k8, nkv, kInputScale);
  QuantizeInPlace<<<1024, 256>>>(b.v, b.v8, nkv, kInputScale);
  const bool fp8_out = f.o_type == CUDNN_DATA_FP8_E4M3;
  const float factors[8] = {1 / kInputScale, 1 / kInputScale, 1 / kInputScale, 1 / kProbScale, kProbScale,
                            fp8_out ? kOutputScale : 1.0f, 0.0f, 0.0f};
  CHECK(cudaMemcpy(b.factors, factors, sizeof(factors), cudaMemcpyHostToDevice));
  const int32_t lengths[2] = {static_cast<int32_t>(s.sq), static_cast<int32_t>(s.skv)};
  CHECK(cudaMemcpy(b.seq_lens, lengths, sizeof(lengths), cudaMemcpyHostToDevice));
  float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  float neg_inf = std::numeric_limits<float>::lowest();

  DiagonalScalars diagonal8, diagonal16;  // by-value scalars the packs point at
  auto pack_of = [&](CudnnGraphBuilder& packs, bool fp8, const AttentionGraphForm& form, void* ws,
                     DiagonalScalars& diagonal) {
    std::vector<int64_t> uids = {kUidQ, kUidK, kUidV, kUidO, kUidScale};
    std::vector<void*> ptrs = {fp8 ? static_cast<void*>(b.q8) : b.q, fp8 ? static_cast<void*>(b.k8) : b.k,
                               fp8 ? static_cast<void*>(b.v8) : b.v, fp8 ? b.o8 : b.o, &scale};
    if (form.mask != AttentionMask::kNone) {
      uids.push_back(kUidNegInf);
      ptrs.push_back(&neg_inf);
    }
    diagonal = DiagonalScalarsFor(form, s.sq, s.skv);
    for (int i = 0; i < diagonal.count; ++i) {
      uids.push_back(diagonal.uids[i]);
      ptrs.push_back(&diagonal.values[i]);
    }
    if (form.mask == AttentionMask::kPadded) {
      uids.insert(uids.end(), {kUidSeqLenQ, kUidSeqLenKv});
      ptrs.insert(ptrs.end(), {b.seq_lens, b.seq_lens + 1});
    }
    if (form.stats_in_memory) {
      uids.push_back(kUidStats);
      ptrs.push_back(b.stats);
    }
    if (fp8) {
      const int64_t ids[8] = {kUidDescaleQ, kUidDescaleK, kUidDescaleV, kUidDescaleS,
                              kUidScaleS,   kUidScaleO,   kUidAmaxS,    kUidAmaxO};
      for (int i = 0; i < 8; ++i) {
        uids.push_back(ids[i]);
        ptrs.push_back(b.factors + i);
      }
    }
    cudnnBackendDescriptor_t pack = packs.Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    const auto n = static_cast<int64_t>(uids.size());
    packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data(), "pack uids");
    packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs.data(), "pack pointers");
    packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "pack workspace");
    packs.Finalize(pack, "variant pack");
    return pack;
  };
  CudnnGraphBuilder packs8(Api(), handle), packs16(Api(), handle);
  cudnnBackendDescriptor_t pack8 = pack_of(packs8, true, f.form, b.workspace, diagonal8);
  cudnnBackendDescriptor_t pack16 = plan16 ? pack_of(packs16, false, bf16_form, b.workspace, diagonal16) : nullptr;
  cudnnStatus_t st8 = packs8.ok() ? cudnnBackendExecute(handle, plan8, pack8) : CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st16 = plan16 && packs16.ok() ? cudnnBackendExecute(handle, plan16, pack16) : CUDNN_STATUS_BAD_PARAM;
  CHECK(cudaDeviceSynchronize());
  if (st8 != CUDNN_STATUS_SUCCESS) {
    std::printf("  RESULT %s sq=%lld skv=%lld: fp8 execute failed: %s %s %s\n", f.name.c_str(),
                static_cast<long long>(s.sq), static_cast<long long>(s.skv), cudnnGetErrorString(st8),
                packs8.error().c_str(), LastCudnnError().c_str());
  } else {
    std::string errors = "(not checked)";
    if (check) {
      float* ref = nullptr;
      CHECK(cudaMalloc(&ref, nq * 4));
      const bool causal = f.form.mask != AttentionMask::kNone;
      ReferenceAttention<<<static_cast<unsigned>(s.sq), 32>>>(b.q, b.k, b.v, ref, s, scale, causal,
                                                              f.form.mask == AttentionMask::kTopLeft);
      CHECK(cudaDeviceSynchronize());
      std::vector<float> want(static_cast<size_t>(nq));
      CHECK(cudaMemcpy(want.data(), ref, nq * 4, cudaMemcpyDeviceToHost));
      std::vector<uint8_t> got8(static_cast<size_t>(nq) * 2);
      std::vector<__nv_bfloat16> got16(static_cast<size_t>(nq));
      CHECK(cudaMemcpy(got8.data(), b.o8, nq * 2, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(got16.data(), b.o, nq * 2, cudaMemcpyDeviceToHost));
      double max8 = 0, sum8 = 0, max16 = 0, sum16 = 0, ref_abs = 0;
      for (int64_t i = 0; i < nq; ++i) {
        float x8;
        if (fp8_out) {
          __nv_fp8_e4m3 c;
          c.__x = got8[static_cast<size_t>(i)];
          x8 = static_cast<float>(c) / kOutputScale;
        } else {
          __nv_bfloat16 h;
          std::memcpy(&h, &got8[static_cast<size_t>(i) * 2], 2);
          x8 = __bfloat162float(h);
        }
        const double e8 = std::fabs(x8 - want[i]), e16 = std::fabs(__bfloat162float(got16[i]) - want[i]);
        max8 = std::fmax(max8, e8);
        sum8 += e8;
        max16 = std::fmax(max16, e16);
        sum16 += e16;
        ref_abs += std::fabs(want[i]);
      }
      CHECK(cudaFree(ref));
      // The bf16 graph runs the top-left and unmasked forms' references only where they agree.
      const bool bf16_comparable = f.form.mask == AttentionMask::kPadded ||
                                   f.form.mask == AttentionMask::kAddKeysSubQueries || s.sq == s.skv;
      char line[256];
      std::snprintf(line, sizeof(line), "mean |ref| %.4g; fp8 max err %.4g mean %.4g; bf16 max err %.4g mean %.4g%s",
                    ref_abs / nq, max8, sum8 / nq, max16, sum16 / nq, bf16_comparable ? "" : " (bf16: another mask)");
      errors = line;
    }
    const int iters = s.sq * s.skv > (int64_t{1} << 28) ? 5 : 20;
    const double ms8 = TimeMs(handle, plan8, pack8, iters);
    const double ms16 = st16 == CUDNN_STATUS_SUCCESS ? TimeMs(handle, plan16, pack16, iters) : 0.0;
    const double pairs = f.form.mask == AttentionMask::kNone
                             ? static_cast<double>(s.sq) * s.skv
                             : static_cast<double>(s.sq) * (s.skv - s.sq) + 0.5 * s.sq * (s.sq + 1.0);
    const double flop = 4.0 * pairs * s.d * s.hq;
    std::printf("  RESULT %s sq=%lld skv=%lld: fp8 %.3f ms (%.0f TFLOP/s), bf16 %.3f ms (%.0f TFLOP/s); %s\n",
                f.name.c_str(), static_cast<long long>(s.sq), static_cast<long long>(s.skv), ms8,
                flop / (ms8 * 1e-3) / 1e12, ms16, ms16 > 0 ? flop / (ms16 * 1e-3) / 1e12 : 0.0, errors.c_str());
  }
  for (void* p : {static_cast<void*>(b.q), static_cast<void*>(b.k), static_cast<void*>(b.v), static_cast<void*>(b.o),
                  static_cast<void*>(b.q8), static_cast<void*>(b.k8), static_cast<void*>(b.v8), b.o8,
                  static_cast<void*>(b.factors), static_cast<void*>(b.stats), static_cast<void*>(b.seq_lens),
                  b.workspace}) {
    cudaFree(p);
  }
}

}  // namespace

// No argument: the build-only sweep; a form's index: that form checked and timed, in a
// process of its own so that a form whose execution faults cannot stop the others.
int main(int argc, char** argv) {
  std::printf("cuDNN %zu (headers %d)\n", cudnnGetVersion(), CUDNN_VERSION);
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::printf("cudnnCreate failed: %s\n", LastCudnnError().c_str());
    return 1;
  }
  const std::vector<Fp8Form> forms = Forms();
  if (argc > 1) {
    const size_t i = static_cast<size_t>(std::atoi(argv[1]));
    if (i >= forms.size()) return 2;
    const bool square_only = forms[i].form.mask == AttentionMask::kTopLeft;
    const AttentionGraphShape checks[] = {{256, 256, 32, 8, 128}, {128, 384, 32, 8, 128}, {200, 333, 32, 8, 128}};
    for (const AttentionGraphShape& s : checks) {
      if (!square_only || s.sq == s.skv) RunCase(handle, forms[i], s, true);
    }
    // Long contexts of nearly flat scores: probabilities far below 1 / 448, where an E4M3 P
    // taken after the softmax's division would lose its digits.
    if (!square_only && forms[i].form.mask != AttentionMask::kNone) {
      for (const AttentionGraphShape& s : {AttentionGraphShape{64, 32768, 32, 8, 128},
                                           AttentionGraphShape{128, 131072, 32, 8, 128}}) {
        RunCase(handle, forms[i], s, true);
      }
    }
    const AttentionGraphShape timed[] = {{2048, 2048, 32, 8, 128},
                                         {2048, 32768, 32, 8, 128},
                                         {2048, 131072, 32, 8, 128},
                                         {32768, 32768, 32, 8, 128}};
    for (const AttentionGraphShape& s : timed) RunCase(handle, forms[i], s, false);
    cudnnDestroy(handle);
    return 0;
  }
  const AttentionGraphShape sweep_shape{256, 512, 32, 8, 128};
  for (size_t i = 0; i < forms.size(); ++i) {
    CudnnGraphBuilder g(Api(), handle);
    BuildCausalAttentionGraphFp8(g, sweep_shape, forms[i].form, forms[i].o_type);
    int64_t workspace_bytes = 0;
    cudnnBackendDescriptor_t plan = g.ok() ? g.Plan(&workspace_bytes) : nullptr;
    std::printf("FORM %zu %-28s %s%s\n", i, forms[i].name.c_str(), plan != nullptr ? "BUILT" : "refused: ",
                plan != nullptr ? "" : g.error().c_str());
    std::printf("%s", g.plan_log().c_str());
  }
  cudnnDestroy(handle);
  return 0;
}
