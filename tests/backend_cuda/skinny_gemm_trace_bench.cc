// Where a W8A8 skinny projection's time goes on the TMA pipeline (issue #34: at 64 rows a call
// costs about 10 µs more than its weight bytes need at the HBM ceiling). Each CTA stamps
// %globaltimer as it starts, passes its PDL wait, sees its first bytes land, finishes its last
// step and leaves, and sums the time it spends finishing tiles (SetSkinnyTrace). For each
// Llama-3-8B projection shape the bench runs four calls back to back, in two ways:
//   plain: stream launches without PDL, the next call starting when the previous has ended;
//   graph: the four captured with PDL in one graph and replayed, as a decode step runs them.
// It does so for each code row size and lookahead (SkinnyTmaTuning) and prints a line per case:
// the steady cost of a call (the last exits of calls 0 and 3, apart, over 3) and, for call 2,
// the CTAs' median first-bytes, streaming and finishing times, and the finish's parts
// (arriving at split tiles, adding others' partials, storing the output); KVTIER_SKINNY_TRACE_DETAIL=1
// prints every call's percentiles over the CTAs of each phase as well. Not a test (disabled; it
// checks nothing). Run it with
//   kvtier_cuda_skinny_test --gtest_also_run_disabled_tests --gtest_filter='SkinnyGemmTrace.*'
// (rows from KVTIER_SKINNY_BENCH_ROWS, default 64; row sizes from KVTIER_SKINNY_TRACE_ROW_BYTES,
// default 128,256; lookaheads from KVTIER_SKINNY_TRACE_LOOKAHEAD, default 0,2,3,4,6).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/skinny_gemm.h"
#include "bench_check.h"
#include "bench_env.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

struct TraceShape {
  const char* name;
  int n, k;
};
constexpr TraceShape kTraceShapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096},
                                       {"down", 4096, 14336}};
constexpr int kCalls = 4;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// p10 / p50 / max of v (µs).
void PrintPhase(const char* name, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::printf("  %-14s p10 %7.2f  p50 %7.2f  max %7.2f\n", name, v[v.size() / 10], v[v.size() / 2], v.back());
}

// One call's CTAs (grid of them, kSkinnyTraceSlots stamps each): absolute times in ns, phase
// durations in µs.
struct CallPhases {
  std::vector<int64_t> producer_entry, entry, exit;
  std::vector<double> pdl, first, stream, finish, arrive, reduce, output;
  int64_t first_entry = INT64_MAX, last_exit = 0, steps_min = INT64_MAX, steps_max = 0;
};
CallPhases Phases(const int64_t* t, int grid) {
  CallPhases out;
  auto us = [](int64_t ns) { return ns / 1000.0; };
  for (int c = 0; c < grid; ++c) {
    const int64_t* s = t + c * cuda::kSkinnyTraceSlots;
    out.producer_entry.push_back(s[cuda::kTraceProducerEntryNs]);
    out.entry.push_back(s[cuda::kTraceEntryNs]);
    out.exit.push_back(s[cuda::kTraceExitNs]);
    out.pdl.push_back(us(s[cuda::kTracePdlDoneNs] - s[cuda::kTraceEntryNs]));
    out.first.push_back(us(s[cuda::kTraceFirstDataNs] - s[cuda::kTraceProducerEntryNs]));
    out.stream.push_back(us(s[cuda::kTraceLastStepNs] - s[cuda::kTraceFirstDataNs]));
    out.finish.push_back(us(s[cuda::kTraceFinishNs]));
    out.arrive.push_back(us(s[cuda::kTraceArriveNs]));
    out.reduce.push_back(us(s[cuda::kTraceReduceNs]));
    out.output.push_back(us(s[cuda::kTraceOutputNs]));
    out.first_entry = std::min(out.first_entry, s[cuda::kTraceEntryNs]);
    out.last_exit = std::max(out.last_exit, s[cuda::kTraceExitNs]);
    out.steps_min = std::min(out.steps_min, s[cuda::kTraceSteps]);
    out.steps_max = std::max(out.steps_max, s[cuda::kTraceSteps]);
  }
  return out;
}

// µs from `origin` of each time in `ns`.
std::vector<double> Since(const std::vector<int64_t>& ns, int64_t origin) {
  std::vector<double> out;
  for (int64_t t : ns) out.push_back((t - origin) / 1000.0);
  return out;
}

// One call's percentiles, its times relative to the earliest MMA entry of call 0 (origin),
// and its gap after the end of the call before it.
void PrintCall(int call, const CallPhases& c, int64_t origin, int64_t previous_end) {
  std::printf(" call %d: span %.2f us (first entry to last exit), gap after the previous call's last exit %.2f us,"
              " %lld-%lld steps a CTA\n",
              call, (c.last_exit - c.first_entry) / 1000.0,
              previous_end == 0 ? 0.0 : (c.first_entry - previous_end) / 1000.0, static_cast<long long>(c.steps_min),
              static_cast<long long>(c.steps_max));
  PrintPhase("producer entry", Since(c.producer_entry, origin));
  PrintPhase("mma entry", Since(c.entry, origin));
  PrintPhase("pdl wait", c.pdl);
  PrintPhase("first bytes", c.first);
  PrintPhase("streaming", c.stream);
  PrintPhase("finishing", c.finish);
  PrintPhase("exit", Since(c.exit, origin));
}

TEST(SkinnyGemmTrace, DISABLED_W8A8Tma) {
  KVT_SKIP_WITHOUT_CUDA();
  if (!cuda::SkinnyGemmDeviceOk(0)) GTEST_SKIP() << "the skinny kernels need compute capability 9.0";
  int rows = 64;
  if (const char* env = std::getenv("KVTIER_SKINNY_BENCH_ROWS"); env != nullptr) rows = std::atoi(env);
  cudaDeviceProp props{};
  KVT_BENCH_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
  const int sms = props.multiProcessorCount;
  std::printf("device %s, %d SMs, L2 %d MB, %d rows, W8A8 TMA pipeline\n", props.name, sms,
              props.l2CacheSize >> 20, rows);
  KVT_BENCH_CUDA_CHECK(cuda::SkinnyGemmInit());
  cudaStream_t stream;
  KVT_BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t ws_bytes = cuda::SkinnyGemmWorkspaceBytes(rows, sms);
  void* workspace = nullptr;
  uint8_t* x8 = nullptr;
  float* x_scales = nullptr;
  cuda::bf16* out = nullptr;
  int64_t* trace = nullptr;
  const size_t trace_slots = size_t{kCalls} * sms * cuda::kSkinnyTraceSlots;
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&workspace, ws_bytes));
  KVT_BENCH_CUDA_CHECK(cudaMemset(workspace, 0, ws_bytes));
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&x8, size_t{128} * 14336));
  KVT_BENCH_CUDA_CHECK(cudaMemset(x8, 0x30, size_t{128} * 14336));
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&x_scales, 128 * sizeof(float)));
  KVT_BENCH_CUDA_CHECK(cudaMemset(x_scales, 0, 128 * sizeof(float)));
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&out, size_t{128} * 28672 * 2));
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&trace, trace_slots * sizeof(int64_t)));
  std::vector<int64_t> host(trace_slots);

  const bool detail = std::getenv("KVTIER_SKINNY_TRACE_DETAIL") != nullptr;
  const std::vector<int> row_sizes = EnvIntList("KVTIER_SKINNY_TRACE_ROW_BYTES", "128,256");
  const std::vector<int> lookaheads = EnvIntList("KVTIER_SKINNY_TRACE_LOOKAHEAD", "0,2,3,4,6");
  std::printf("%-8s %5s %9s %-6s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "shape", "row_B", "lookahead", "mode",
              "us/call", "first_p50", "strm_p50", "fin_p50", "fin_max", "arr_p50", "red_p50", "red_max", "out_p50");
  for (const TraceShape& s : kTraceShapes) {
    const size_t elements = static_cast<size_t>(s.n) * s.k;
    // One weight copy per call, together past the L2, so each call streams from HBM.
    std::vector<uint8_t*> w(kCalls);
    float* scales = nullptr;
    KVT_BENCH_CUDA_CHECK(cudaMalloc(&scales, s.n * sizeof(float)));
    KVT_BENCH_CUDA_CHECK(cudaMemset(scales, 0, s.n * sizeof(float)));
    for (auto& copy : w) {
      KVT_BENCH_CUDA_CHECK(cudaMalloc(&copy, elements));
      KVT_BENCH_CUDA_CHECK(cudaMemset(copy, 0x35, elements));
    }
    auto call = [&](int i, const CudaLaunchOptions& launch) {
      cuda::SetSkinnyTrace(trace + size_t{static_cast<size_t>(i)} * sms * cuda::kSkinnyTraceSlots);
      KVT_BENCH_CUDA_CHECK(cuda::SkinnyGemmW8A8(x8, x_scales, w[i], scales, rows, s.k, s.n, out, workspace, sms,
                                                cuda::SkinnyPipeline::kTma, stream, launch));
    };
    CudaLaunchOptions plain;
    plain.pdl = false;
    CudaLaunchOptions pdl;  // the defaults: PDL on
    for (int row_bytes : row_sizes) {
      for (int lookahead : lookaheads) {
        cuda::SkinnyTmaTuning tuning;
        tuning.code_row_bytes = row_bytes;
        tuning.lookahead = lookahead;
        cuda::SetSkinnyTmaTuning(tuning);
        // The graph: the four calls captured with PDL (the tuning and trace pointers baked in).
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        KVT_BENCH_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < kCalls; ++i) call(i, pdl);
        KVT_BENCH_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        KVT_BENCH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (const char* mode : {"plain", "graph"}) {
          const bool in_graph = mode[0] == 'g';
          KVT_BENCH_CUDA_CHECK(cudaMemset(trace, 0, trace_slots * sizeof(int64_t)));
          for (int warm = 0; warm < 3; ++warm) {  // the last round is the one printed
            if (in_graph) {
              KVT_BENCH_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            } else {
              for (int i = 0; i < kCalls; ++i) call(i, plain);
            }
            KVT_BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
          }
          KVT_BENCH_CUDA_CHECK(
              cudaMemcpy(host.data(), trace, trace_slots * sizeof(int64_t), cudaMemcpyDeviceToHost));
          int grid = 0;  // the CTAs that ran (one per SM, fewer where the shape has fewer steps)
          while (grid < sms && host[grid * cuda::kSkinnyTraceSlots + cuda::kTraceSteps] > 0) ++grid;
          auto call_trace = [&](int i) {
            return host.data() + size_t{static_cast<size_t>(i)} * sms * cuda::kSkinnyTraceSlots;
          };
          const CallPhases c0 = Phases(call_trace(0), grid), c2 = Phases(call_trace(2), grid),
                           c3 = Phases(call_trace(kCalls - 1), grid);
          std::vector<double> finish_sorted = c2.finish;
          std::sort(finish_sorted.begin(), finish_sorted.end());
          std::printf("%-8s %5d %9d %-6s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", s.name, row_bytes,
                      lookahead, mode, (c3.last_exit - c0.last_exit) / 1000.0 / (kCalls - 1), Median(c2.first),
                      Median(c2.stream), Median(c2.finish), finish_sorted.back(), Median(c2.arrive),
                      Median(c2.reduce), *std::max_element(c2.reduce.begin(), c2.reduce.end()), Median(c2.output));
          if (!detail) continue;
          std::printf("%s %s: n %d k %d, %.1f MB of codes a call (%.2f us at 4 TB/s)\n", s.name, mode, s.n, s.k,
                      elements / 1e6, elements / 4e6);
          int64_t previous_end = 0;
          for (int i = 0; i < kCalls; ++i) {
            const CallPhases c = i == 0 ? c0 : Phases(call_trace(i), grid);
            PrintCall(i, c, c0.first_entry, previous_end);
            previous_end = c.last_exit;
          }
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      }
    }
    cuda::SetSkinnyTrace(nullptr);
    cuda::SetSkinnyTmaTuning(cuda::SkinnyTmaTuning());
    for (auto* copy : w) cudaFree(copy);
    cudaFree(scales);
  }
  cudaFree(trace);
  cudaFree(out);
  cudaFree(x_scales);
  cudaFree(x8);
  cudaFree(workspace);
  cudaStreamDestroy(stream);
  std::fflush(stdout);
}

}  // namespace
}  // namespace kvtier
