// Whether and how fast cuDNN's MoE grouped matmul (CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR,
// cuDNN >= 9.18) runs kvtier's expert GEMMs for prefill-sized steps, beside a loop of cuBLAS GEMMs
// (one per expert, the routes' rows gathered first) on the same data. kvtier's grouped GEMM
// (moe_kernels.h, the 64x64 tile) reaches about 100-140 TFLOP/s at 2,048 rows
// (bench/results/2026-12-05-h100-cudnn-default/m1/moe_bench.txt).
//
// Shapes: Qwen3-30B-A3B (hidden 2048, 128 experts, top 8, expert intermediate 768) and Mixtral
// 8x7B (4096, 8, top 2, 14336), at 64, 512 and 2,048 tokens, bf16. Each token's experts are
// distinct, drawn at random; the routes are ordered by expert (kvtier's slot order,
// MoeGroupRoutes), FirstTokenOffset holds each expert's first slot. Two operations:
//   gate_up: GATHER mode, the tokens (S, hidden) read through TokenIndex (each slot's token),
//            times each expert's (2 * inter, hidden) matrix;
//   down:    NONE mode, the slots' activations (S * top_k, inter) times (hidden, inter).
// The weights are kvtier's layout, (experts, N, K) row-major, given to cuDNN as [E, K, N] with
// K's stride 1 ("k-major"); where no engine takes that, the same bytes as [E, K, N] with N's
// stride 1 ("n-major": other values, the same work) tell whether a transposed copy would run.
// FirstTokenOffset and TokenIndex are int64 (see Index64). Each result is checked on a sample of
// slots against an fp32 CUDA-core reference.
// Prints cuDNN's version, each engine config's finalize status and a RESULT line per case.
//
// Build: nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc -Ibench/micro bench/micro/cudnn_moe.cu
//          src/backend/cuda/cudnn_graph.cc -lcudnn -lcublas -o cudnn_moe
// Run on the GPU machine with torch's cuDNN first on the path (as cudnn_sdpa.cu).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_graph.h"
#include "cuda_check.h"
#include "cudnn_probe.cuh"

namespace {

using GraphBuilder = kvtier::cuda::CudnnGraphBuilder;
using kvtier::probe::Api;
using kvtier::probe::FillRandom;
using kvtier::probe::LastCudnnError;

struct MoeShape {
  const char* name;
  int64_t hidden, experts, top_k, inter;
};

enum Uid : int64_t { kToken = 1, kWeight, kOffsets, kTokenIndex, kOutput };

// FirstTokenOffset and TokenIndex in int64; KVTIER_MOE_INDEX32=1: in int32, which cuDNN 9.19's
// sm80 engine accepts at finalize and then reads as int64, out of bounds
// (bench/results/2026-12-07-moe-library/m4).
bool Index64() {
  const char* v = std::getenv("KVTIER_MOE_INDEX32");
  return v == nullptr || v[0] != '1';
}

// One projection: out (slots, n) = token rows (gathered or in slot order) times the slot's
// expert's (n, k) matrix^T.
struct Projection {
  const char* name;
  bool gather;
  int64_t k, n;
};

// The routing of `tokens` tokens: each token's top_k distinct experts at random, the routes
// ordered by expert.
struct Routing {
  std::vector<int32_t> slot_token, slot_expert, first_slot;  // first_slot: (experts)
  std::vector<int32_t> count;                                // routes per expert
};

Routing Route(const MoeShape& s, int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> per_expert(static_cast<size_t>(s.experts));
  std::vector<int32_t> experts(static_cast<size_t>(s.experts));
  std::iota(experts.begin(), experts.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t j = 0; j < s.top_k; ++j) {
      per_expert[static_cast<size_t>(experts[static_cast<size_t>(j)])].push_back(static_cast<int32_t>(t));
    }
  }
  Routing r;
  for (int64_t e = 0; e < s.experts; ++e) {
    r.first_slot.push_back(static_cast<int32_t>(r.slot_token.size()));
    r.count.push_back(static_cast<int32_t>(per_expert[static_cast<size_t>(e)].size()));
    for (int32_t t : per_expert[static_cast<size_t>(e)]) {
      r.slot_token.push_back(t);
      r.slot_expert.push_back(static_cast<int32_t>(e));
    }
  }
  return r;
}

// ref[i] (n) for sampled slot sample[i]: the fp32 dot products of its row with its expert's
// matrix, the element (e, k, n) at e * n_dim * k_dim + k * k_stride + n * n_stride.
__global__ void ReferenceSlots(const __nv_bfloat16* rows, const int32_t* row_of_slot, const __nv_bfloat16* w,
                               const int32_t* slot_expert, const int32_t* sample, int64_t k_dim, int64_t n_dim,
                               int64_t k_stride, int64_t n_stride, float* ref) {
  const int32_t slot = sample[blockIdx.x];
  const int64_t row = row_of_slot != nullptr ? row_of_slot[slot] : slot;
  const __nv_bfloat16* x = rows + row * k_dim;
  const __nv_bfloat16* we = w + static_cast<int64_t>(slot_expert[slot]) * n_dim * k_dim;
  for (int64_t n = threadIdx.x; n < n_dim; n += blockDim.x) {
    float acc = 0.0f;
    for (int64_t k = 0; k < k_dim; ++k) {
      acc += __bfloat162float(x[k]) * __bfloat162float(we[k * k_stride + n * n_stride]);
    }
    ref[blockIdx.x * n_dim + n] = acc;
  }
}

__global__ void GatherRows(const __nv_bfloat16* x, const int32_t* slot_token, int64_t slots, int64_t k,
                           __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < slots * k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = x[static_cast<int64_t>(slot_token[i / k]) * k + i % k];
  }
}

// The MoE operation on kvtier's tensors; n_major: the weights' N stride 1 instead of K's.
void BuildMoe(GraphBuilder& g, const MoeShape& s, const Projection& p, int64_t tokens, bool n_major) {
  using K = GraphBuilder::Kind;
  const int64_t slots = tokens * s.top_k, rows = p.gather ? tokens : slots;
  cudnnBackendDescriptor_t token = g.Tensor(kToken, CUDNN_DATA_BFLOAT16, {1, rows, p.k}, {rows * p.k, p.k, 1},
                                            K::kDevice, "token");
  const std::vector<int64_t> w_strides =
      n_major ? std::vector<int64_t>{p.n * p.k, p.n, 1} : std::vector<int64_t>{p.n * p.k, 1, p.k};
  cudnnBackendDescriptor_t weight =
      g.Tensor(kWeight, CUDNN_DATA_BFLOAT16, {s.experts, p.k, p.n}, w_strides, K::kDevice, "weight");
  const cudnnDataType_t index_type = Index64() ? CUDNN_DATA_INT64 : CUDNN_DATA_INT32;
  cudnnBackendDescriptor_t offsets =
      g.Tensor(kOffsets, index_type, {s.experts, 1, 1}, {1, 1, 1}, K::kDevice, "first token offset");
  cudnnBackendDescriptor_t out =
      g.Tensor(kOutput, CUDNN_DATA_BFLOAT16, {1, slots, p.n}, {slots * p.n, p.n, 1}, K::kDevice, "output");
  cudnnBackendDescriptor_t index = nullptr;
  if (p.gather) {
    index = g.Tensor(kTokenIndex, index_type, {1, slots, 1}, {slots, 1, 1}, K::kDevice, "token index");
  }
  cudnnBackendDescriptor_t op = g.Create(CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR);
  const cudnnMoeGroupedMatmulMode_t mode =
      p.gather ? CUDNN_MOE_GROUPED_MATMUL_MODE_GATHER : CUDNN_MOE_GROUPED_MATMUL_MODE_NONE;
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  g.Set(op, CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_MODE, CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE, 1, &mode, "moe mode");
  g.Set(op, CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "moe math");
  g.Link(op, CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_DESC, token, "moe token");
  g.Link(op, CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_WEIGHT_DESC, weight, "moe weight");
  g.Link(op, CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_FIRST_TOKEN_OFFSET_DESC, offsets, "moe offsets");
  g.Link(op, CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_OUTPUT_DESC, out, "moe output");
  if (index != nullptr) g.Link(op, CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_INDEX_DESC, index, "moe token index");
  g.Finalize(op, "moe operation");
  g.AddOperation(op);
}

template <typename F>
double TimeMs(F&& run, int iters) {
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  run();
  CHECK(cudaEventRecord(t0));
  for (int i = 0; i < iters; ++i) run();
  CHECK(cudaEventRecord(t1));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return ms / iters;
}

// Largest |got - ref| over the sampled slots, relative to the largest |ref|.
double SampleError(const __nv_bfloat16* got_dev, const float* ref_dev, const std::vector<int32_t>& sample, int64_t n) {
  std::vector<float> ref(sample.size() * static_cast<size_t>(n));
  CHECK(cudaMemcpy(ref.data(), ref_dev, ref.size() * 4, cudaMemcpyDeviceToHost));
  double err = 0.0, scale = 0.0;
  std::vector<__nv_bfloat16> row(static_cast<size_t>(n));
  for (size_t i = 0; i < sample.size(); ++i) {
    CHECK(cudaMemcpy(row.data(), got_dev + static_cast<int64_t>(sample[i]) * n, n * 2, cudaMemcpyDeviceToHost));
    for (int64_t j = 0; j < n; ++j) {
      const double r = ref[i * static_cast<size_t>(n) + static_cast<size_t>(j)];
      err = std::fmax(err, std::fabs(static_cast<double>(__bfloat162float(row[static_cast<size_t>(j)])) - r));
      scale = std::fmax(scale, std::fabs(r));
    }
  }
  return scale > 0 ? err / scale : err;
}

void RunCase(cudnnHandle_t handle, cublasHandle_t cublas, const MoeShape& s, const Projection& p, int64_t tokens) {
  const Routing r = Route(s, tokens, 17);
  const int64_t slots = tokens * s.top_k, rows = p.gather ? tokens : slots;
  __nv_bfloat16 *x, *w, *out, *gathered;
  int32_t *slot_token, *slot_expert, *first_slot, *sample_dev;
  CHECK(cudaMalloc(&x, rows * p.k * 2));
  CHECK(cudaMalloc(&w, s.experts * p.n * p.k * 2));
  CHECK(cudaMalloc(&out, slots * p.n * 2));
  CHECK(cudaMalloc(&gathered, slots * p.k * 2));
  CHECK(cudaMalloc(&slot_token, slots * 4));
  CHECK(cudaMalloc(&slot_expert, slots * 4));
  CHECK(cudaMalloc(&first_slot, s.experts * 4));
  FillRandom<<<1024, 256>>>(x, rows * p.k, 1);
  FillRandom<<<1024, 256>>>(w, s.experts * p.n * p.k, 2);
  CHECK(cudaMemcpy(slot_token, r.slot_token.data(), slots * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(slot_expert, r.slot_expert.data(), slots * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(first_slot, r.first_slot.data(), s.experts * 4, cudaMemcpyHostToDevice));
  int64_t *first_slot64, *slot_token64;
  CHECK(cudaMalloc(&first_slot64, s.experts * 8));
  CHECK(cudaMalloc(&slot_token64, slots * 8));
  {
    const std::vector<int64_t> f(r.first_slot.begin(), r.first_slot.end()), t(r.slot_token.begin(), r.slot_token.end());
    CHECK(cudaMemcpy(first_slot64, f.data(), s.experts * 8, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(slot_token64, t.data(), slots * 8, cudaMemcpyHostToDevice));
  }
  std::vector<int32_t> sample;
  for (int64_t i = 0; i < slots; i += std::max<int64_t>(1, slots / 48)) sample.push_back(static_cast<int32_t>(i));
  sample.push_back(static_cast<int32_t>(slots - 1));
  CHECK(cudaMalloc(&sample_dev, sample.size() * 4));
  CHECK(cudaMemcpy(sample_dev, sample.data(), sample.size() * 4, cudaMemcpyHostToDevice));
  float* ref;
  CHECK(cudaMalloc(&ref, sample.size() * p.n * 4));
  const double flops = 2.0 * slots * p.n * p.k;
  const double weight_mb = 2.0 * s.experts * p.n * p.k / 1e6;
  const int iters = 20;
  std::printf("  %s %s, %lld tokens (%lld routes, %.0f MB of weights):\n", s.name, p.name,
              static_cast<long long>(tokens), static_cast<long long>(slots), weight_mb);

  for (bool n_major : {false, true}) {
    GraphBuilder g(Api(), handle);
    BuildMoe(g, s, p, tokens, n_major);
    int64_t workspace_bytes = 0;
    cudnnBackendDescriptor_t plan = g.ok() ? g.Plan(&workspace_bytes) : nullptr;
    std::printf("%s", g.plan_log().c_str());
    const char* layout = n_major ? "n-major" : "k-major";
    if (plan == nullptr) {
      std::printf("  RESULT cudnn %s %s S=%lld %s: not built: %s\n", s.name, p.name, static_cast<long long>(tokens),
                  layout, g.error().c_str());
      continue;
    }
    void* workspace = nullptr;
    if (workspace_bytes > 0) CHECK(cudaMalloc(&workspace, workspace_bytes));
    std::vector<int64_t> uids = {kToken, kWeight, kOffsets, kOutput};
    std::vector<void*> ptrs = {x, w, Index64() ? static_cast<void*>(first_slot64) : first_slot, out};
    if (p.gather) {
      uids.push_back(kTokenIndex);
      ptrs.push_back(Index64() ? static_cast<void*>(slot_token64) : slot_token);
    }
    GraphBuilder packs(Api(), handle);
    cudnnBackendDescriptor_t pack = packs.Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
              uids.data(), "pack uids");
    packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
              ptrs.data(), "pack pointers");
    packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "pack workspace");
    packs.Finalize(pack, "variant pack");
    const cudnnStatus_t st = packs.ok() ? cudnnBackendExecute(handle, plan, pack) : CUDNN_STATUS_BAD_PARAM;
    if (st != CUDNN_STATUS_SUCCESS) {
      std::printf("  RESULT cudnn %s %s S=%lld %s: execute failed: %s %s %s\n", s.name, p.name,
                  static_cast<long long>(tokens), layout, cudnnGetErrorString(st), packs.error().c_str(),
                  LastCudnnError().c_str());
    } else {
      CHECK(cudaDeviceSynchronize());
      ReferenceSlots<<<static_cast<unsigned>(sample.size()), 256>>>(
          x, p.gather ? slot_token : nullptr, w, slot_expert, sample_dev, p.k, p.n, n_major ? p.n : 1,
          n_major ? 1 : p.k, ref);
      CHECK(cudaDeviceSynchronize());
      const double err = SampleError(out, ref, sample, p.n);
      const double ms = TimeMs([&] { cudnnBackendExecute(handle, plan, pack); }, iters);
      std::printf("  RESULT cudnn %s %s S=%lld %s: %.3f ms, %.0f TFLOP/s, %.2f TB/s of weights, rel err %.2e\n",
                  s.name, p.name, static_cast<long long>(tokens), layout, ms, flops / (ms * 1e-3) / 1e12,
                  weight_mb * 1e6 / (ms * 1e-3) / 1e12, err);
    }
    if (workspace != nullptr) cudaFree(workspace);
    if (!n_major) break;  // the weights' own layout ran: the transposed one says nothing more
  }

  // cuBLAS, one GEMM per expert with routes, on the rows gathered in slot order beforehand
  // (the gather is timed apart).
  const __nv_bfloat16* a = x;
  double gather_ms = 0.0;
  if (p.gather) {
    auto gather = [&] { GatherRows<<<1024, 256>>>(x, slot_token, slots, p.k, gathered); };
    gather_ms = TimeMs(gather, iters);
    a = gathered;
  }
  auto loop = [&] {
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t e = 0; e < s.experts; ++e) {
      const int c = r.count[static_cast<size_t>(e)];
      if (c == 0) continue;
      const int64_t first = r.first_slot[static_cast<size_t>(e)];
      cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.n), c, static_cast<int>(p.k), &alpha,
                   w + e * p.n * p.k, CUDA_R_16BF, static_cast<int>(p.k), a + first * p.k, CUDA_R_16BF,
                   static_cast<int>(p.k), &beta, out + first * p.n, CUDA_R_16BF, static_cast<int>(p.n),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
  };
  CHECK(cudaMemset(out, 0, slots * p.n * 2));
  loop();
  CHECK(cudaDeviceSynchronize());
  ReferenceSlots<<<static_cast<unsigned>(sample.size()), 256>>>(x, p.gather ? slot_token : nullptr, w, slot_expert,
                                                                sample_dev, p.k, p.n, 1, p.k, ref);
  CHECK(cudaDeviceSynchronize());
  const double err = SampleError(out, ref, sample, p.n);
  const double ms = TimeMs(loop, iters);
  std::printf("  RESULT cublas-loop %s %s S=%lld: %.3f ms (+ gather %.3f ms), %.0f TFLOP/s, rel err %.2e\n", s.name,
              p.name, static_cast<long long>(tokens), ms, gather_ms, flops / (ms * 1e-3) / 1e12, err);
  for (void* ptr : std::vector<void*>{x, w, out, gathered, slot_token, slot_expert, first_slot, sample_dev, ref,
                                      first_slot64, slot_token64}) {
    cudaFree(ptr);
  }
}

}  // namespace

int main() {
  std::printf("cuDNN %zu\n", cudnnGetVersion());
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) return std::printf("cudnnCreate failed\n"), 1;
  cublasHandle_t cublas;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return std::printf("cublasCreate failed\n"), 1;
  const MoeShape shapes[] = {{"qwen3-30b-a3b", 2048, 128, 8, 768}, {"mixtral-8x7b", 4096, 8, 2, 14336}};
  for (const MoeShape& s : shapes) {
    const Projection projections[] = {{"gate_up", true, s.hidden, 2 * s.inter}, {"down", false, s.inter, s.hidden}};
    for (int64_t tokens : {64, 512, 2048}) {
      for (const Projection& p : projections) RunCase(handle, cublas, s, p, tokens);
    }
  }
  cublasDestroy(cublas);
  cudnnDestroy(handle);
  return 0;
}
