// The decode attention kernel timed alone (decode_attention_bench.h): Llama-3-8B shape, one
// layer's attention per launch, KV rotated over 32 layers (and 8 row copies for W1) so it
// is not L2-resident; each case on a stream and captured in a graph, DecodeAttention against
// the generic PagedAttention, then a sweep over max_splits. Median microseconds and the KV
// bandwidth they imply.
#include "decode_attention_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda_options.h"
#include "cuda_test_data.h"
#include "decode_world.h"

namespace kvtier::cuda {
namespace {

using cuda_test::DecodeWorld;
using cuda_test::DeviceArray;
using cuda_test::DeviceDecode;
using cuda_test::RelativeError;
using cuda_test::DecodeWave;
using cuda_test::ToF32;
using cuda_test::Tolerance;

// Returns 1 from the enclosing function, naming the failed call.
#define BENCH_CHECK(expr)                                                               \
  do {                                                                                  \
    const cudaError_t bench_err_ = (expr);                                              \
    if (bench_err_ != cudaSuccess) {                                                    \
      std::printf("[decode-bench] %s: %s\n", #expr, cudaGetErrorString(bench_err_));    \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

// Median of per-launch event timings (us); launch(i) enqueues repetition i.
template <typename Launch>
double MedianUs(cudaStream_t stream, int warm, int reps, Launch launch) {
  for (int i = 0; i < warm; ++i) launch(i);
  std::vector<cudaEvent_t> ev(2 * reps);
  for (cudaEvent_t& e : ev) cudaEventCreate(&e);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(ev[2 * i], stream);
    launch(warm + i);
    cudaEventRecord(ev[2 * i + 1], stream);
  }
  cudaStreamSynchronize(stream);
  std::vector<double> us(reps);
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
    us[i] = ms * 1e3;
  }
  for (cudaEvent_t& e : ev) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  return us[reps / 2];
}

// Per-launch time (us) of `per_graph` launches (launch(i), i < per_graph) captured in one
// graph: median over replays, divided by per_graph.
template <typename Launch>
double GraphUs(cudaStream_t stream, int per_graph, Launch launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
  for (int i = 0; i < per_graph; ++i) launch(i);
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) return -1;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return -1;
  const double us = MedianUs(stream, 3, 20, [&](int) { cudaGraphLaunch(exec, stream); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us / per_graph;
}

struct BenchCase {
  const char* name;
  int rows, ctx_lo, ctx_hi, copies;
  std::vector<int> sweep;
  int layers = 32;    // KV rotated over this many layers (enough to defeat the L2)
  bool fp8 = false;   // e4m3 KV with row scales (new kernel only: random bytes, no cross-check)
};

}  // namespace

int TimeDecodeAttention(const CudaLaunchOptions& launch) {
  bool failed = false;
  std::mt19937 rng{1234};
  const int heads = 32, kv_heads = 8, head_dim = 128, bt = 16;
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<BenchCase> cases = {
      {"W1", 1, 600, 600, 8, {8, 16}},
      {"W2", 64, 512, 768, 1, {1, 2}},
      {"W2b", 16, 512, 768, 1, {2, 3, 4}},
      {"W4", 1, 32768, 32768, 1, {32, 40, 48, 56}},
      {"W4b", 4, 8192, 8192, 1, {8, 12, 16}},
      {"W1-fp8", 1, 600, 600, 8, {8, 16}, 32, true},
      {"W2-fp8", 64, 512, 768, 1, {1, 2}, 32, true},
      {"W4-fp8", 1, 32768, 32768, 1, {32, 48}, 32, true},
      // W9: hundreds of rows at 1,000-2,000 positions; one layer's KV is gigabytes.
      {"W9-256", 256, 1000, 2000, 1, {1, 2, 4}, 2},
      {"W9-512-fp8", 512, 1000, 2000, 1, {1, 2, 4}, 2, true},
      {"W9-256-fp8", 256, 1000, 2000, 1, {1, 2, 4}, 2, true},
  };
  for (const BenchCase& bc : cases) {
    std::uniform_int_distribution<int> ctx_dist(bc.ctx_lo, bc.ctx_hi);
    std::vector<int> base(bc.rows), ctx;
    for (int& c : base) c = ctx_dist(rng);
    for (int k = 0; k < bc.copies; ++k) ctx.insert(ctx.end(), base.begin(), base.end());
    const int layers = bc.layers;
    DecodeWorld w(heads, kv_heads, head_dim, bt, layers, ctx, 0, 0, rng);
    if (bc.fp8) w.layout.dtype = DType::kF8E4M3;
    // Rows in step-token order so copy k is rows [k*rows, (k+1)*rows).
    std::iota(w.rows.begin(), w.rows.end(), 0);
    w.Reassign(ctx, rng);
    DeviceDecode dev(w, kDecodeMaxSplitsLimit);
    if (dev.pool.get() == nullptr) {
      std::printf("[decode-bench] %s: pool allocation failed\n", bc.name);
      return 1;
    }
    BENCH_CHECK(cudaDeviceSynchronize());  // the poison memsets ran on the legacy stream
    BENCH_CHECK(FillRandom(reinterpret_cast<bf16*>(dev.pool.get()), dev.pool.size(), 7, 0.0f,
                           2.0f, stream));
    BENCH_CHECK(FillRandom(reinterpret_cast<bf16*>(dev.q.get()), dev.q.size(), 8, 0.0f, 2.0f,
                           stream));
    double kv_bytes = 0;  // K and V: 2-byte elements, or 1-byte codes and a 4-byte scale per row
    for (int r = 0; r < bc.rows; ++r) {
      kv_bytes += 2.0 * base[r] * kv_heads * (bc.fp8 ? head_dim + 4 : head_dim * 2);
    }
    const PagedKv<bf16> kv = dev.Kv<bf16>(w);
    const StepTokens tokens = dev.Tokens(w);
    auto tbs = [&](double us) { return kv_bytes / (us * 1e-6) / 1e12; };

    auto run_new = [&](int i, int max_splits, int pair_tiles = -1) {
      DecodeAttentionParams<bf16> p = dev.Params<bf16>(w, i % layers, max_splits);
      p.fp8_pair_tiles = pair_tiles;
      p.rows = dev.rows.get() + (i % bc.copies) * bc.rows;
      p.num_rows = bc.rows;
      failed |= DecodeAttention(p, tokens, kv, stream, launch) != cudaSuccess;
    };

    if (bc.fp8) {  // bytes of random bf16 values: some NaN codes, which change no timing
      for (int pair : {0, 1, 2}) {  // DecodeAttentionParams::fp8_pair_tiles
        for (int s : bc.sweep) {
          const double us = MedianUs(stream, 5, 40, [&](int i) { run_new(i, s, pair); });
          const double gus = GraphUs(stream, layers, [&](int i) { run_new(i, s, pair); });
          std::printf("[decode-bench] %s rows=%d ctx=%d..%d KV=%.1fMB pair_tiles=%d max_splits=%3d (heuristic %d): "
                      "stream %.2f us %.2f TB/s, graph %.2f us %.2f TB/s\n",
                      bc.name, bc.rows, bc.ctx_lo, bc.ctx_hi, kv_bytes / 1e6, pair, s,
                      DecodeMaxSplits(bc.rows, kv_heads, DecodeWave(head_dim, true, bt, pair)), us, tbs(us), gus,
                      tbs(gus));
        }
      }
      std::fflush(stdout);
      BENCH_CHECK(cudaStreamSynchronize(stream));
      BENCH_CHECK(cudaGetLastError());
      continue;
    }
    // Old kernel: planned once for copy 0's rows; copy k's items point at its chunks/tokens.
    std::vector<ChunkShape> shapes;
    for (int r = 0; r < bc.rows; ++r) shapes.push_back({1, base[r] - 1});
    AttentionPlanOptions o;
    o.num_heads = heads;
    o.num_kv_heads = kv_heads;
    o.max_rows = AttentionMaxRows(head_dim);
    o.partial_slots = 4096;  // CudaBackend: max(max_tokens_per_step, 16 * max_sequences)
    AttentionPlan plan;
    if (!PlanAttention(shapes, o, &plan).ok()) {
      std::printf("[decode-bench] %s: PlanAttention failed\n", bc.name);
      return 1;
    }
    std::vector<AttentionItem> items;
    std::vector<int32_t> splits, bases;
    for (int k = 0; k < bc.copies; ++k) {
      for (AttentionItem it : plan.items) {
        it.chunk += k * bc.rows;
        it.token_begin += k * bc.rows;
        items.push_back(it);
      }
      splits.insert(splits.end(), plan.num_splits.begin(), plan.num_splits.end());
      bases.insert(bases.end(), plan.partial_base.begin(), plan.partial_base.end());
    }
    DeviceArray<AttentionItem> d_items(items.size());
    DeviceArray<int32_t> d_splits(splits.size()), d_bases(bases.size());
    DeviceArray<float> d_po(o.partial_slots * heads * head_dim), d_pml(o.partial_slots * heads * 2);
    DeviceArray<uint16_t> old_out(dev.out.size());
    d_items.Upload(items);
    d_splits.Upload(splits);
    d_bases.Upload(bases);
    BENCH_CHECK(cudaDeviceSynchronize());
    auto run_old = [&](int i) {
      AttentionParams<bf16> p;
      p.q = reinterpret_cast<const bf16*>(dev.q.get());
      p.out = reinterpret_cast<bf16*>(old_out.get());
      p.items = d_items.get() + (i % bc.copies) * plan.items.size();
      p.num_items = static_cast<int32_t>(plan.items.size());
      p.num_heads = heads;
      p.layer = i % layers;
      p.max_rows = plan.max_rows;
      p.any_split = plan.any_split;
      failed |= PagedAttention(p, tokens, kv,
                               AttentionSplits{d_splits.get(), d_bases.get(), d_po.get(),
                                               d_pml.get()},
                               stream) != cudaSuccess;
    };

    const int ms = DecodeMaxSplits(bc.rows, kv_heads, DecodeWave(head_dim, bc.fp8, bt));
    const double new_us = MedianUs(stream, 10, 60, [&](int i) { run_new(i, ms); });
    const double new_graph = GraphUs(stream, layers, [&](int i) { run_new(i, ms); });
    const double old_us = MedianUs(stream, 10, 60, run_old);
    const double old_graph = GraphUs(stream, layers, run_old);
    BENCH_CHECK(cudaStreamSynchronize(stream));
    BENCH_CHECK(cudaGetLastError());
    // Cross-check the two kernels on copy 0, layer 0.
    dev.out.Poison();
    old_out.Poison();
    BENCH_CHECK(cudaDeviceSynchronize());
    run_new(0, ms);
    run_old(0);
    BENCH_CHECK(cudaStreamSynchronize(stream));
    const size_t n = static_cast<size_t>(bc.rows) * heads * head_dim;
    const std::vector<uint16_t> a = dev.out.Download(), b = old_out.Download();
    const double diff =
        RelativeError(ToF32<bf16>(std::vector<uint16_t>(a.begin(), a.begin() + n)),
                      ToF32<bf16>(std::vector<uint16_t>(b.begin(), b.begin() + n)));
    if (!(diff < Tolerance<bf16>())) {
      std::printf("[decode-bench] %s: DecodeAttention and PagedAttention differ (rel %.1e)\n",
                  bc.name, diff);
      failed = true;
    }
    std::printf("[decode-bench] %s rows=%d ctx=%d..%d KV=%.1fMB max_splits=%d | new stream %.2f us "
                "%.2f TB/s, graph %.2f us %.2f TB/s | old stream %.2f us %.2f TB/s, graph %.2f us "
                "%.2f TB/s (old split_tokens %d) | speedup graph %.2fx | new-vs-old rel %.1e\n",
                bc.name, bc.rows, bc.ctx_lo, bc.ctx_hi, kv_bytes / 1e6, ms, new_us, tbs(new_us),
                new_graph, tbs(new_graph), old_us, tbs(old_us), old_graph, tbs(old_graph),
                plan.split_tokens, old_graph / new_graph, diff);
    for (int s : bc.sweep) {
      const double us = MedianUs(stream, 5, 40, [&](int i) { run_new(i, s); });
      const double gus = GraphUs(stream, layers, [&](int i) { run_new(i, s); });
      std::printf("[decode-bench] %s sweep max_splits=%3d: stream %.2f us %.2f TB/s, graph %.2f us "
                  "%.2f TB/s\n",
                  bc.name, s, us, tbs(us), gus, tbs(gus));
    }
    std::fflush(stdout);
    BENCH_CHECK(cudaStreamSynchronize(stream));
    BENCH_CHECK(cudaGetLastError());
  }
  cudaStreamDestroy(stream);
  if (failed) std::printf("[decode-bench] a launch failed or the kernels disagreed\n");
  return failed ? 1 : 0;
}

}  // namespace kvtier::cuda
