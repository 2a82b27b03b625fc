// What the skinny projection's kernels share (skinny_gemm_kernel.cuh: the cp.async pipelines;
// skinny_gemm_tma.cuh: the TMA pipeline): the tile shape, the parameters, the stream-K ranges.
#ifndef KVTIER_BACKEND_CUDA_SKINNY_GEMM_COMMON_CUH_
#define KVTIER_BACKEND_CUDA_SKINNY_GEMM_COMMON_CUH_

#include <cstddef>
#include <cstdint>

#include "backend/cuda/elem.cuh"

namespace kvtier::cuda::skinny {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kBN = 128;       // weight rows per tile
constexpr int kBK = 128;       // k per step
// Tile counters sit at the start of the workspace at a fixed size, so calls of different n
// agree on where they are: n up to kMaxTiles * kBN.
constexpr int kMaxTiles = 16384;
constexpr size_t kCounterBytes = kMaxTiles * sizeof(int);

// What the two operands hold: bf16 x bf16; fp8 weight codes converted to bf16 in shared
// memory (W8A16); or fp8 codes on both sides read by the fp8 wgmma directly (W8A8: no
// conversion, half the x bytes, a deeper ring), with one scale per token too.
enum class Operands { kBf16, kW8A16, kW8A8 };

struct Params {
  const bf16* x;         // bf16 activations (kBf16, kW8A16)
  const uint8_t* x8;     // kW8A8: E4M3 activation codes (m, k) ...
  const float* x_scales; // ... and one scale per token
  const void* w;         // bf16 rows or fp8 codes
  const float* scales;   // fp8: one per weight row; bf16: null
  void* out;
  float* partials;       // 2 slots per CTA (a range has at most 2 partial tiles)
  int* counters;         // one per tile, zero between calls
  int m, k, n;
  int ks;                // k steps per tile
  int64_t total_steps;
  int64_t* trace;        // TMA pipeline only: null, or kSkinnyTraceSlots stamps per CTA (SetSkinnyTrace)
  // Grouped (SkinnyGemmGrouped; cp.async pipelines only): problem q, problems[q] = {expert,
  // first row, rows, 0}, is x's rows [first, first + rows) times its expert's (n, k) matrix^T
  // into the same rows of out, the experts' matrices (and scales) stacked in w; its tiles are
  // q * tiles_per_problem onwards. Null: one problem, x's m rows times w.
  const int4* problems;
  int num_problems;
  int tiles_per_problem;
};

// What a tile covers: its first row in the (stacked) weights and their scales, its first
// output column, its first row of x and of out, and its rows.
struct TileSpan {
  int64_t w_row;
  int col;
  int64_t x_row;
  int m;
};

__device__ __forceinline__ TileSpan SpanOf(const Params& p, int64_t tile) {
  if (p.problems == nullptr) return {tile * kBN, static_cast<int>(tile * kBN), 0, p.m};
  const int64_t q = tile / p.tiles_per_problem;
  const int col = static_cast<int>(tile - q * p.tiles_per_problem) * kBN;
  const int4 problem = p.problems[q];
  return {static_cast<int64_t>(problem.x) * p.n + col, col, problem.y, problem.z};
}

__device__ __forceinline__ int64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<int64_t>(t);
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// First step of CTA `cta`'s range, and the CTA whose range holds step s.
__device__ __forceinline__ int64_t RangeBegin(int64_t cta, int64_t total, int64_t grid) { return cta * total / grid; }
__device__ __forceinline__ int64_t StepOwner(int64_t s, int64_t total, int64_t grid) {
  return ((s + 1) * grid - 1) / total;
}

}  // namespace kvtier::cuda::skinny

#endif  // KVTIER_BACKEND_CUDA_SKINNY_GEMM_COMMON_CUH_
