// Micro-benchmark of the kernels that quantize decode activations to E4M3 per token
// (fp8_activations.h), at Llama-3-8B's widths, decode batch sizes and a prefill chunk's rows:
//  - GatedMulFp8 (SiLU(gate) * up, 14336 wide) with each row on one CTA and spread over a
//    cluster of 2, 4 or 8 CTAs (GatedMulFp8Spread), and the spread GatedMulFp8 picks;
//  - AddRmsNormFp8 and QuantizeActivationsFp8 (4096 wide).
// Each figure is the time per launch of a CUDA graph of 64 launches on the same buffers (in L2
// up to a few hundred rows, as in a decode step, where the previous projection just wrote them;
// from HBM at a prefill chunk's 1,024-2,048 rows), with programmatic
// dependent launch as the library launches them, the median of 15 replays. Every spread's
// codes and scales are checked against the one-CTA kernel's, byte for byte.
// It also checks the device's float -> E4M3 conversion (Float2ToFp8x2) against
// common/fp8_e4m3.h's FloatToFp8E4M3 over all 2^32 float bit patterns.
// Exit status 2 if a check fails.
//
// Build (here), against the library's CUDA archive for the rest of the kernels:
//   nvcc -O3 -std=c++17 -arch=sm_90a -Isrc -Ibench/micro --expt-relaxed-constexpr \
//     bench/micro/fp8_activation_rows.cu src/backend/cuda/fp8_activations.cu \
//     build/src/backend/cuda/libkvtier_cuda_impl.a -lcuda -o fp8_activation_rows
// With -DFP8_ROWS_ONE_CTA_ONLY (and without fp8_activations.cu, the archive's own then) it
// times the library as built before the spread kernels: GatedMulFp8 alone, no checks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_activations.h"
#ifndef FP8_ROWS_ONE_CTA_ONLY
#include "backend/cuda/fp8_codes.cuh"
#endif
#include "common/fp8_e4m3.h"
#include "launch_env.h"
#include "cuda_check.h"

using kvtier::cuda::bf16;
namespace kc = kvtier::cuda;

static const kvtier::CudaLaunchOptions g_launch = LaunchOptionsFromEnv();

#ifndef FP8_ROWS_ONE_CTA_ONLY
// Counts the float bit patterns base + i (one per thread) whose device codes, of the value and of
// its negation, differ from FloatToFp8E4M3's; keeps the first few in first[1..8].
__global__ void ConversionMismatches(uint32_t base, unsigned long long* mismatches, uint32_t* first) {
  const uint32_t bits = base + blockIdx.x * blockDim.x + threadIdx.x;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  const uint32_t hw = kc::Float2ToFp8x2(value, -value);
  const uint32_t want = kvtier::FloatToFp8E4M3(value) | (static_cast<uint32_t>(kvtier::FloatToFp8E4M3(-value)) << 8);
  if (hw != want) {
    if (atomicAdd(mismatches, 1ull) < 8) first[atomicAdd(first, 1u) % 8 + 1] = bits;
  }
}

bool CheckConversion() {
  unsigned long long* d_count;
  uint32_t* d_first;
  CHECK(cudaMalloc(&d_count, sizeof(unsigned long long)));
  CHECK(cudaMalloc(&d_first, 9 * sizeof(uint32_t)));
  CHECK(cudaMemset(d_count, 0, sizeof(unsigned long long)));
  CHECK(cudaMemset(d_first, 0, 9 * sizeof(uint32_t)));
  const uint32_t per_pass = 1u << 30;
  for (uint64_t base = 0; base < (1ull << 32); base += per_pass) {
    ConversionMismatches<<<per_pass / 256, 256>>>(static_cast<uint32_t>(base), d_count, d_first);
    CHECK(cudaGetLastError());
  }
  unsigned long long count = 0;
  uint32_t first[9];
  CHECK(cudaMemcpy(&count, d_count, sizeof(count), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(first, d_first, sizeof(first), cudaMemcpyDeviceToHost));
  std::printf("float -> e4m3 on the device against FloatToFp8E4M3, all 2^32 floats (and their negations): %llu "
              "mismatches",
              count);
  for (unsigned i = 0; i < std::min<unsigned long long>(count, 8); ++i) std::printf(" 0x%08x", first[i + 1]);
  std::printf("\n");
  CHECK(cudaFree(d_count));
  CHECK(cudaFree(d_first));
  return count == 0;
}
#endif

// Microseconds per call of `enqueue` (64 calls in one graph), the median of 15 replays.
template <typename F>
double TimePerCall(F enqueue, cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 64; ++i) CHECK(enqueue());
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> ms;
  for (int rep = 0; rep < 15; ++rep) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms[ms.size() / 2] * 1000.0 / 64;
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; launch: pdl %d, early trigger %d\n", prop.name, prop.multiProcessorCount, g_launch.pdl,
              g_launch.pdl_early_trigger);
  bool ok = true;
#ifndef FP8_ROWS_ONE_CTA_ONLY
  ok = CheckConversion() && ok;
#endif
  const int inter = 14336, hidden = 4096, max_rows = 2048;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<bf16> host(static_cast<size_t>(max_rows) * 2 * inter);
  for (bf16& v : host) v = __float2bfloat16(dist(rng));
  bf16 *d_gate_up, *d_x;
  float *d_residual, *d_weight, *d_scales, *d_scales_ref;
  uint8_t *d_codes, *d_codes_ref;
  CHECK(cudaMalloc(&d_gate_up, host.size() * sizeof(bf16)));
  CHECK(cudaMemcpy(d_gate_up, host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&d_x, static_cast<size_t>(max_rows) * hidden * sizeof(bf16)));
  CHECK(cudaMemcpy(d_x, host.data(), static_cast<size_t>(max_rows) * hidden * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&d_residual, static_cast<size_t>(max_rows) * hidden * sizeof(float)));
  std::vector<float> residual(static_cast<size_t>(max_rows) * hidden);
  for (float& v : residual) v = dist(rng);
  CHECK(cudaMemcpy(d_residual, residual.data(), residual.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> ones(hidden, 1.0f);
  CHECK(cudaMalloc(&d_weight, hidden * sizeof(float)));
  CHECK(cudaMemcpy(d_weight, ones.data(), hidden * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&d_codes, static_cast<size_t>(max_rows) * inter));
  CHECK(cudaMalloc(&d_codes_ref, static_cast<size_t>(max_rows) * inter));
  CHECK(cudaMalloc(&d_scales, max_rows * sizeof(float)));
  CHECK(cudaMalloc(&d_scales_ref, max_rows * sizeof(float)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::printf("\nGatedMulFp8, %d wide, us per launch (graph of 64, PDL)\n", inter);
#ifdef FP8_ROWS_ONE_CTA_ONLY
  std::printf("%6s %10s\n", "rows", "library");
#else
  std::printf("%6s %10s %10s %10s %10s %10s  %s\n", "rows", "1 CTA", "2 CTAs", "4 CTAs", "8 CTAs", "library",
              "library's spread: same bytes as 1 CTA");
#endif
  for (const int rows : {1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048}) {
    std::printf("%6d", rows);
#ifdef FP8_ROWS_ONE_CTA_ONLY
    std::printf(" %10.2f\n", TimePerCall([&] {
      return kc::GatedMulFp8(d_gate_up, rows, inter, kc::GateActivation::kSilu, d_codes, d_scales, stream, g_launch);
    }, stream));
#else
    CHECK(kc::GatedMulFp8Spread(d_gate_up, rows, inter, kc::GateActivation::kSilu, 1, d_codes_ref, d_scales_ref,
                                stream, g_launch));
    CHECK(cudaStreamSynchronize(stream));  // the copies below run on the legacy stream
    std::vector<uint8_t> ref_codes(static_cast<size_t>(rows) * inter), codes(ref_codes.size());
    std::vector<float> ref_scales(rows), scales(rows);
    bool all_same = true;
    CHECK(cudaMemcpy(ref_codes.data(), d_codes_ref, ref_codes.size(), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(ref_scales.data(), d_scales_ref, rows * sizeof(float), cudaMemcpyDeviceToHost));
    for (const int ctas : {1, 2, 4, 8, 0}) {
      const double us = TimePerCall([&] {
        return kc::GatedMulFp8Spread(d_gate_up, rows, inter, kc::GateActivation::kSilu, ctas, d_codes, d_scales,
                                     stream, g_launch);
      }, stream);
      CHECK(cudaMemset(d_codes, 0, codes.size()));
      CHECK(kc::GatedMulFp8Spread(d_gate_up, rows, inter, kc::GateActivation::kSilu, ctas, d_codes, d_scales, stream,
                                  g_launch));
      CHECK(cudaStreamSynchronize(stream));
      CHECK(cudaMemcpy(codes.data(), d_codes, codes.size(), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(scales.data(), d_scales, rows * sizeof(float), cudaMemcpyDeviceToHost));
      const bool same = codes == ref_codes && std::memcmp(scales.data(), ref_scales.data(), rows * sizeof(float)) == 0;
      all_same = all_same && same;
      std::printf(" %9.2f%s", us, same ? " " : "!");
    }
    ok = ok && all_same;
    std::printf("  %s\n", all_same ? "yes" : "NO (! marks the spread that differs)");
#endif
  }

  std::printf("\nAddRmsNormFp8 and QuantizeActivationsFp8, %d wide, us per launch\n%6s %14s %14s\n", hidden, "rows",
              "AddRmsNormFp8", "Quantize");
  for (const int rows : {1, 16, 64, 128, 256, 512, 2048}) {
    const double norm = TimePerCall([&] {
      return kc::AddRmsNormFp8(d_residual, static_cast<const bf16*>(nullptr), d_weight, rows, hidden, 1e-5f, d_codes,
                               d_scales, stream, g_launch);
    }, stream);
    const double quant = TimePerCall([&] {
      return kc::QuantizeActivationsFp8(d_x, rows, hidden, d_codes, d_scales, stream, g_launch);
    }, stream);
    std::printf("%6d %14.2f %14.2f\n", rows, norm, quant);
  }
  std::printf("\n%s\n", ok ? "all checks passed" : "A CHECK FAILED");
  return ok ? 0 : 2;
}
