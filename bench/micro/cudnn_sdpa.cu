// Whether and how fast cuDNN's fused attention runs kvtier's prefill shape, through the
// backend (graph) API that the library would call: causal, bottom-right aligned (a chunk of
// sq queries at the end of skv keys), GQA (32 query heads over 8 K/V heads), head_dim 128,
// bf16 in and out, fp32 softmax. Q and O are kvtier's (rows, heads, head_dim) layout, K and V
// contiguous (rows, kv_heads, head_dim).
//
// With no argument: a sweep of the composite graph's forms (cudnn_graph.h AttentionGraphForm:
// softmax stats branch, P's type, the causal mask's form) and heuristics modes, build only:
// which forms this cuDNN offers engines for, with cuDNN's messages (run with
// CUDNN_LOGLEVEL_DBG=2 for its reasons); then the unified graph, one
// CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR (cuDNN >= 9.13) without a mask (its causal mask
// is a subgraph from cuDNN 9.21 on), as the speed of the engine a causal unified graph would
// run. With a form's index: that form's graph checked against a plain fp32 CUDA reference on
// small shapes and timed on W4's shapes (32k x 32k, and 4k-query chunks over 32k keys).
// Prints cuDNN's version, each engine config's finalize status, errors with cuDNN's own
// message, and a table.
//
// The composite graph and the graph builder are the library's own (src/backend/cuda/cudnn_graph.h),
// called here through the linked cuDNN rather than the library's run-time loaded one.
// Build: nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc -Ibench/micro bench/micro/cudnn_sdpa.cu
//          src/backend/cuda/cudnn_graph.cc -lcudnn -o cudnn_sdpa
// Run on the GPU machine with torch's cuDNN first on the path:
//   LD_LIBRARY_PATH=$(python3 -c 'import nvidia.cudnn,os;print(os.path.dirname(nvidia.cudnn.__file__)+"/lib")') ./cudnn_sdpa
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_graph.h"
#include "cudnn_probe.cuh"

namespace {

#define CUDA_OK(x)                                                                             \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                   \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

using Shape = kvtier::cuda::AttentionGraphShape;
using GraphBuilder = kvtier::cuda::CudnnGraphBuilder;
using kvtier::cuda::kUidK;

using kvtier::probe::Api;
using kvtier::probe::FillRandom;
using kvtier::probe::ReferenceAttention;
using kvtier::probe::LastCudnnError;

// The unified SDPA operation, no mask.
void BuildUnified(GraphBuilder& g, const Shape& s) {
  const kvtier::cuda::AttentionIoTensors io = kvtier::cuda::MakeAttentionIo(g, s);
  // The unified operation takes K itself, not K^T.
  cudnnBackendDescriptor_t k = g.Tensor(kUidK, CUDNN_DATA_BFLOAT16, {1, s.hk, s.skv, s.d},
                                        {s.skv * s.hk * s.d, s.d, s.hk * s.d, 1}, GraphBuilder::Kind::kDevice, "K");
  cudnnBackendDescriptor_t scale = g.Scalar(kvtier::cuda::kUidScale, CUDNN_DATA_FLOAT, "scale");
  cudnnBackendDescriptor_t op = g.Create(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, io.q, "sdpa Q");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k, "sdpa K");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, io.v, "sdpa V");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, io.o, "sdpa O");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale, "sdpa scale");
  g.Finalize(op, "sdpa operation");
  g.AddOperation(op);
}

struct Buffers {
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// Builds, checks (when `check`) and times one graph on one shape; prints a table row.
// A padded form's graph takes `graph_skv` key rows (0: skv rounded up to 64).
void RunCase(cudnnHandle_t handle, const char* graph_name, bool unified, const Shape& s, bool check,
             const kvtier::cuda::AttentionGraphForm& form = {}, int64_t graph_skv = 0) {
  // The padded form's graph takes more key rows than the chunk has, as the library's plans do;
  // the chunk's own lengths come in device tensors and the rows past them hold random values.
  const bool padded = !unified && form.mask == kvtier::cuda::AttentionMask::kPadded;
  Shape graph_shape = s;
  if (padded) graph_shape.skv = graph_skv > 0 ? graph_skv : (s.skv + 63) / 64 * 64;
  std::printf("  %s, sq %lld skv %lld (graph's keys %lld):\n", graph_name, static_cast<long long>(s.sq),
              static_cast<long long>(s.skv), static_cast<long long>(graph_shape.skv));
  GraphBuilder g(Api(), handle);
  if (unified) {
    BuildUnified(g, graph_shape);
  } else {
    kvtier::cuda::BuildCausalAttentionGraph(g, graph_shape, form);
  }
  int64_t workspace_bytes = 0;
  // A plan per shape is what a chunked prefill would build: its cost decides whether plans are
  // cached per shape, padded to a few shapes, or built with dynamic shapes.
  const auto build_start = std::chrono::steady_clock::now();
  cudnnBackendDescriptor_t plan = g.ok() ? g.Plan(&workspace_bytes) : nullptr;
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - build_start).count();
  std::printf("%s", g.plan_log().c_str());
  std::printf("    graph + plan built in %.1f ms, workspace %lld bytes\n", build_ms,
              static_cast<long long>(workspace_bytes));
  if (plan == nullptr) {
    std::printf("  RESULT %s sq=%lld skv=%lld: not built: %s\n", graph_name, static_cast<long long>(s.sq),
                static_cast<long long>(s.skv), g.error().c_str());
    return;
  }
  Buffers b;
  const int64_t nq = s.sq * s.hq * s.d, nkv = graph_shape.skv * s.hk * s.d;
  CUDA_OK(cudaMalloc(&b.q, nq * 2));
  CUDA_OK(cudaMalloc(&b.o, nq * 2));
  CUDA_OK(cudaMalloc(&b.k, nkv * 2));
  CUDA_OK(cudaMalloc(&b.v, nkv * 2));
  if (workspace_bytes > 0) CUDA_OK(cudaMalloc(&b.workspace, workspace_bytes));
  FillRandom<<<1024, 256>>>(b.q, nq, 1);
  FillRandom<<<1024, 256>>>(b.k, nkv, 2);
  FillRandom<<<1024, 256>>>(b.v, nkv, 3);
  float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  float neg_inf = std::numeric_limits<float>::lowest();
  kvtier::cuda::DiagonalScalars diagonal = kvtier::cuda::DiagonalScalarsFor(form, s.sq, s.skv);
  using namespace kvtier::cuda;  // the uids
  std::vector<int64_t> uids = {kUidQ, kUidK, kUidV, kUidO, kUidScale};
  std::vector<void*> ptrs = {b.q, b.k, b.v, b.o, &scale};
  float* stats = nullptr;
  int32_t* seq_lens = nullptr;
  if (!unified) {
    if (form.mask != AttentionMask::kNone) {
      uids.push_back(kUidNegInf);
      ptrs.push_back(&neg_inf);
    }
    for (int i = 0; i < diagonal.count; ++i) {
      uids.push_back(diagonal.uids[i]);
      ptrs.push_back(&diagonal.values[i]);
    }
    if (padded) {
      int32_t lengths[2] = {static_cast<int32_t>(s.sq), static_cast<int32_t>(s.skv)};
      CUDA_OK(cudaMalloc(&seq_lens, sizeof(lengths)));
      CUDA_OK(cudaMemcpy(seq_lens, lengths, sizeof(lengths), cudaMemcpyHostToDevice));
      uids.insert(uids.end(), {kUidSeqLenQ, kUidSeqLenKv});
      ptrs.insert(ptrs.end(), {seq_lens, seq_lens + 1});
    }
    if (form.softmax_stats && form.stats_in_memory) {
      CUDA_OK(cudaMalloc(&stats, s.sq * s.hq * 4));
      uids.push_back(kUidStats);
      ptrs.push_back(stats);
    }
  }
  GraphBuilder packs(Api(), handle);
  cudnnBackendDescriptor_t pack = packs.Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data(),
            "pack uids");
  packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
            ptrs.data(), "pack pointers");
  packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b.workspace, "pack workspace");
  packs.Finalize(pack, "variant pack");
  cudnnStatus_t st = packs.ok() ? cudnnBackendExecute(handle, plan, pack) : CUDNN_STATUS_BAD_PARAM;
  if (st != CUDNN_STATUS_SUCCESS) {
    std::printf("  RESULT %s sq=%lld skv=%lld: execute failed: %s %s %s\n", graph_name, static_cast<long long>(s.sq),
                static_cast<long long>(s.skv), cudnnGetErrorString(st), packs.error().c_str(), LastCudnnError().c_str());
  } else {
    CUDA_OK(cudaDeviceSynchronize());
    double max_err = -1.0;
    if (check) {
      float* ref = nullptr;
      CUDA_OK(cudaMalloc(&ref, nq * 4));
      ReferenceAttention<<<static_cast<unsigned>(s.sq), 32>>>(b.q, b.k, b.v, ref, s, scale,
                                                               !unified && form.mask != AttentionMask::kNone, false);
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> want(static_cast<size_t>(nq));
      std::vector<__nv_bfloat16> got(static_cast<size_t>(nq));
      CUDA_OK(cudaMemcpy(want.data(), ref, nq * 4, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got.data(), b.o, nq * 2, cudaMemcpyDeviceToHost));
      max_err = 0.0;
      for (int64_t i = 0; i < nq; ++i) {
        max_err = std::fmax(max_err, std::fabs(static_cast<double>(__bfloat162float(got[i])) - want[i]));
      }
      CUDA_OK(cudaFree(ref));
    }
    cudaEvent_t t0, t1;
    CUDA_OK(cudaEventCreate(&t0));
    CUDA_OK(cudaEventCreate(&t1));
    const int iters = s.sq * s.skv > (int64_t{1} << 28) ? 5 : 20;
    CUDA_OK(cudaEventRecord(t0));
    for (int i = 0; i < iters; ++i) cudnnBackendExecute(handle, plan, pack);
    CUDA_OK(cudaEventRecord(t1));
    CUDA_OK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
    ms /= static_cast<float>(iters);
    // Causal work: the visible (query, key) pairs; the unified graph here computes them all.
    const double pairs = unified ? static_cast<double>(s.sq) * s.skv
                                 : static_cast<double>(s.sq) * (s.skv - s.sq) + 0.5 * s.sq * (s.sq + 1.0);
    const double tflops = 4.0 * pairs * s.d * s.hq / (ms * 1e-3) / 1e12;
    std::printf(
        "  RESULT %s sq=%lld skv=%lld graph_skv=%lld: %.3f ms/layer, x32 layers %.1f ms, %.0f TFLOP/s, max abs err "
        "%s%.4g\n",
        graph_name, static_cast<long long>(s.sq), static_cast<long long>(s.skv), static_cast<long long>(graph_shape.skv),
        ms, 32.0 * ms, tflops, check ? "" : "(not checked) ", max_err);
  }
  cudaFree(b.q);
  cudaFree(b.k);
  cudaFree(b.v);
  cudaFree(b.o);
  if (b.workspace != nullptr) cudaFree(b.workspace);
  if (stats != nullptr) cudaFree(stats);
  if (seq_lens != nullptr) cudaFree(seq_lens);
}


// One form of the composite graph and one heuristics mode, build only: engine configs offered,
// the first that finalizes, and cuDNN's message when none does.
void TryForm(cudnnHandle_t handle, const char* name, const kvtier::cuda::AttentionGraphForm& form,
             cudnnBackendHeurMode_t mode, const Shape& s) {
  GraphBuilder g(Api(), handle);
  kvtier::cuda::BuildCausalAttentionGraph(g, s, form);
  int64_t workspace_bytes = 0;
  cudnnBackendDescriptor_t plan = g.ok() ? g.Plan(&workspace_bytes, mode) : nullptr;
  std::printf("FORM %-34s heur %d: %s%s\n", name, static_cast<int>(mode), plan != nullptr ? "BUILT " : "refused: ",
              plan != nullptr ? "" : g.error().c_str());
  std::printf("%s", g.plan_log().c_str());
}

struct NamedForm {
  std::string name;
  kvtier::cuda::AttentionGraphForm form;
};

// Every mask form x stats (none, virtual, in memory) x P's type.
std::vector<NamedForm> Forms() {
  using kvtier::cuda::AttentionGraphForm;
  using kvtier::cuda::AttentionMask;
  static const char* masks[] = {"nomask", "topleft", "offset", "addsub", "padded"};
  static const char* stat_names[] = {"nostats", "stats", "stats-mem"};
  std::vector<NamedForm> forms;
  for (AttentionMask mask : {AttentionMask::kPadded, AttentionMask::kAddKeysSubQueries, AttentionMask::kOffset,
                             AttentionMask::kTopLeft, AttentionMask::kNone}) {
    for (int stats = 0; stats < 3; ++stats) {
      for (cudnnDataType_t p : {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16}) {
        AttentionGraphForm f;
        f.mask = mask;
        f.softmax_stats = stats > 0;
        f.stats_in_memory = stats == 2;
        f.p_type = p;
        forms.push_back({std::string(masks[static_cast<int>(mask)]) + "/" + stat_names[stats] + "/" +
                             (p == CUDNN_DATA_FLOAT ? "pf32" : "pbf16"),
                         f});
      }
    }
  }
  return forms;
}

}  // namespace

// With no argument: the build-only sweep of every form and heuristics mode, then the unified
// graph; with a form's index (as the sweep lists it): that form checked on small shapes and
// timed on W4's, in a process of its own, so that a form whose execution faults cannot stop
// the others' runs.
int main(int argc, char** argv) {
  std::printf("cuDNN %zu (headers %d)\n", cudnnGetVersion(), CUDNN_VERSION);
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::printf("cudnnCreate failed: %s\n", LastCudnnError().c_str());
    return 1;
  }
  const Shape checks[] = {{256, 256, 32, 8, 128}, {128, 384, 32, 8, 128}, {200, 333, 32, 8, 128}};
  const Shape timed[] = {{32768, 32768, 32, 8, 128}, {4096, 32768, 32, 8, 128}, {2048, 2048, 32, 8, 128},
                         {8192, 8192, 32, 8, 128}};
  const std::vector<NamedForm> forms = Forms();
  if (argc > 1) {
    const size_t i = static_cast<size_t>(std::atoi(argv[1]));
    if (i >= forms.size()) return 2;
    for (const Shape& s : checks) RunCase(handle, forms[i].name.c_str(), false, s, true, forms[i].form);
    for (const Shape& s : timed) RunCase(handle, forms[i].name.c_str(), false, s, false, forms[i].form);
    if (forms[i].form.mask == kvtier::cuda::AttentionMask::kPadded) {
      // What coarse plans cost: far more key rows in the graph than the chunk has (checked),
      // and a chunk's time on its own rows against a graph of the next power of two.
      RunCase(handle, forms[i].name.c_str(), false, {200, 333, 32, 8, 128}, true, forms[i].form, 1024);
      RunCase(handle, forms[i].name.c_str(), false, {128, 700, 32, 8, 128}, true, forms[i].form, 4096);
      for (int64_t graph_skv : {int64_t{18432}, int64_t{32768}}) {
        RunCase(handle, forms[i].name.c_str(), false, {2048, 18432, 32, 8, 128}, false, forms[i].form, graph_skv);
      }
    }
    cudnnDestroy(handle);
    return 0;
  }
  const Shape sweep_shape{256, 512, 32, 8, 128};
  for (size_t i = 0; i < forms.size(); ++i) {
    std::printf("form %zu: ", i);
    TryForm(handle, forms[i].name.c_str(), forms[i].form, CUDNN_HEUR_MODE_A, sweep_shape);
  }
  const kvtier::cuda::AttentionGraphForm library_form;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
    TryForm(handle, "library default", library_form, mode, sweep_shape);
  }
  if (cudnnGetVersion() < 91300) {
    std::printf("  RESULT unified(no mask): skipped, needs cuDNN >= 9.13\n");
  } else {
    for (const Shape& s : checks) RunCase(handle, "unified(no mask)", true, s, true);
    for (const Shape& s : timed) RunCase(handle, "unified(no mask)", true, s, false);
  }
  cudnnDestroy(handle);
  return 0;
}
