// The skinny projection kernel (skinny_gemm.h), shared by the bf16 and fp8 entry points
// (skinny_gemm.cu, skinny_gemm_fp8.cu: two files so they compile in parallel).
//
// Why this shape of kernel. At m <= 128 the weights are the traffic (x is at most 3.5 MB and
// stays in L2), so each weight byte is streamed from HBM exactly once with many bytes in
// flight on every SM; the arithmetic goes to the tensor cores.
//  - Operands: the weight tile is wgmma's A (64 rows per warpgroup, two warpgroups: 128
//    weight rows per CTA), x the B side, so the token dimension is the MMA's N: m pads to the
//    token tile MT (16, 32, 64, 128). Both are k-contiguous in memory and in shared memory,
//    stored in the 128-byte swizzled layout wgmma descriptors read.
//  - Pipeline: each step loads a 128-wide k slice of the weight tile and of x with 16-byte
//    cp.async into a ring of stages. fp8 codes land raw (half the bytes, so more stages fit)
//    and are converted to bf16 (exact: every E4M3 value is a bf16 value) into a swizzled
//    buffer that wgmma reads; the per-row scale is applied once, to the fp32 result.
//  - kOverlap: one slice's wgmma runs while the next slice's barrier, copies and (fp8)
//    conversion proceed (wait_group 1, two conversion buffers); the ring then refills the slot
//    of two slices back, so one slice less is in flight. Serial waits for every slice's MMAs.
//  - Work split ("stream-K"): the steps of all tiles (tiles x k/128) are cut into one
//    contiguous range per CTA, one CTA per SM, so every SM streams the same number of weight
//    bytes whatever n is (n = 4096 has only 32 tiles of 128 rows for 132 SMs) and there is no
//    tail wave. A range covering a whole tile writes it directly; a partly covered tile is
//    finished by whichever of its contributing CTAs arrives last (per-tile counter in the
//    workspace): each contributor stores its fp32 partial, the last one adds the others (in
//    CTA order: deterministic for a given SM count) and writes out, then resets the counter.
//    One launch, no second pass, graph-safe.
//  - PDL: the first weight slices are requested before PdlWait (weights never depend on the
//    previous kernel); x and the workspace are touched only after it.
#ifndef KVTIER_BACKEND_CUDA_SKINNY_GEMM_KERNEL_CUH_
#define KVTIER_BACKEND_CUDA_SKINNY_GEMM_KERNEL_CUH_

#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/skinny_gemm_common.cuh"
#include "backend/cuda/skinny_gemm_finish.cuh"
#include "backend/cuda/skinny_gemm_tma.cuh"
#include "backend/cuda/wgmma.cuh"

namespace kvtier::cuda::skinny {

constexpr int kSmemBudget = 224 * 1024;  // ring + conversion buffers (227 KB per block at most)
constexpr int kMaxStages = 8;

template <int MT, Operands kOps, bool kOverlap>
struct Config {
  static constexpr bool kConverted = kOps == Operands::kW8A16;  // weight codes -> bf16 in smem
  static constexpr bool kCodes = kOps != Operands::kBf16;       // weights are fp8 codes
  static constexpr bool kX8 = kOps == Operands::kW8A8;          // activations are fp8 codes
  static constexpr int kLag = kOverlap ? 2 : 1;           // ring slots the MMAs may still read
  static constexpr int kWBytes = kBN * kBK * (kCodes ? 1 : 2);
  static constexpr int kXBytes = MT * kBK * (kX8 ? 1 : 2);
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kConvBytes = kConverted ? kBN * kBK * 2 : 0;
  static constexpr int kConvBuffers = kConverted ? (kOverlap ? 2 : 1) : 0;
  static constexpr int kStages = std::min(kMaxStages, (kSmemBudget - kConvBuffers * kConvBytes) / kStageBytes);
  static constexpr int kSmemBytes = kConvBuffers * kConvBytes + kStages * kStageBytes + 1024;  // + alignment slack
  static constexpr int kFragsM = MT / 8;  // n8 accumulator fragments per thread
  static_assert(kStages >= kLag + 2, "at least two slices in flight");
};

__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Offset of 16-byte chunk `chunk` of row `row` in a bf16 tile of ROWS rows: column blocks of
// 64 k (128 bytes per row, a block is ROWS x 128 B), chunk c of row r at c ^ (r % 8) inside
// its block: the 128-byte-swizzled K-major layout of wgmma descriptors (block bases 1024-byte
// aligned).
template <int ROWS>
__device__ __forceinline__ uint32_t Swizzled(int row, int chunk) {
  return static_cast<uint32_t>((((chunk >> 3) * ROWS + row) << 7) + (((chunk & 7) ^ (row & 7)) << 4));
}

// Eight E4M3 codes (low byte first) as eight bf16 (exact), four packed pairs. (An integer
// version, the code's bits placed at the bf16 positions and rescaled by one bf16x2 multiply,
// is slower: the conversion is not what bounds the kernel. docs/CUDA_BACKEND.md.)
__device__ __forceinline__ uint4 CodesToBf16(uint32_t lo, uint32_t hi) { return Fp8CodesToT<bf16>(make_uint2(lo, hi)); }


template <int MT, Operands kOps, bool kOverlap, bool kF32Out>
__global__ void __launch_bounds__(kThreads, 1) SkinnyKernel(Params p) {
  using C = Config<MT, kOps, kOverlap>;
  constexpr bool kFp8 = C::kCodes;
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ int s_last;
  const uint32_t smem_base = (SmemAddr(smem) + 1023u) & ~1023u;  // swizzle atoms: 1024 B
  const uint32_t ring_base = smem_base + C::kConvBuffers * C::kConvBytes;
  const int tid = threadIdx.x, warp = tid >> 5;
  const int64_t grid = gridDim.x, cta = blockIdx.x;
  const int64_t begin = RangeBegin(cta, p.total_steps, grid);
  const int count = static_cast<int>(RangeBegin(cta + 1, p.total_steps, grid) - begin);
  const int ks = p.ks;

  // Each thread copies the same 16-byte chunk column of rows r0, r0 + row_step, ... every
  // step; only the tile (row base) and the k offset change, tracked incrementally.
  constexpr int kXChunks = C::kX8 ? kBK / 16 : kBK / 8;   // 16-byte chunks per activation row slice
  constexpr int kWChunks = kFp8 ? kBK / 16 : kBK / 8;      // ... per weight row slice
  constexpr int kXRowStep = kThreads / kXChunks, kWRowStep = kThreads / kWChunks;
  const int xr0 = tid / kXChunks, xchunk = tid % kXChunks;
  const int wr0 = tid / kWChunks, wchunk = tid % kWChunks;
  // Rows r0 + i * row_step (row_step a multiple of 8) swizzle alike: 128 B apart. W8A16's
  // raw codes land unswizzled (they are converted into a swizzled buffer); W8A8's land
  // swizzled, a 128-code row slice being one 128-byte swizzle row.
  const uint32_t w_offset =
      C::kConverted ? static_cast<uint32_t>(wr0 * kBK + wchunk * 16) : Swizzled<kBN>(wr0, wchunk);
  const uint32_t w_row_bytes = C::kConverted ? kBK : 128;
  const uint32_t x_offset = Swizzled<MT>(xr0, xchunk);
  int load_tile = static_cast<int>(begin / ks), load_kstep = static_cast<int>(begin % ks);
  TileSpan load_span = SpanOf(p, load_tile);
  auto load = [&](int j, bool weights, bool activations) {
    const uint32_t dst = ring_base + (j % C::kStages) * C::kStageBytes;
    if (weights) {
      const int kw = load_kstep * kBK + wchunk * (kFp8 ? 16 : 8);  // in elements
      const int64_t row = load_span.w_row + wr0;
      const int col = load_span.col + wr0;
      const uint8_t* src = static_cast<const uint8_t*>(p.w) + (row * p.k + kw) * (kFp8 ? 1 : 2);
#pragma unroll
      for (int i = 0; i < kBN / kWRowStep; ++i) {
        const bool valid = col + i * kWRowStep < p.n && kw < p.k;
        CpAsync16(dst + w_offset + i * kWRowStep * w_row_bytes,
                  valid ? src + static_cast<int64_t>(i) * kWRowStep * p.k * (kFp8 ? 1 : 2) : p.w, valid);
      }
    }
    if (activations) {
      constexpr int kElemBytes = C::kX8 ? 1 : 2;
      const int kk = load_kstep * kBK + xchunk * (16 / kElemBytes);
      const uint8_t* x_base = C::kX8 ? p.x8 : reinterpret_cast<const uint8_t*>(p.x);
      const uint8_t* src = x_base + ((load_span.x_row + xr0) * p.k + kk) * kElemBytes;
#pragma unroll
      for (int i = 0; i < (MT + kXRowStep - 1) / kXRowStep; ++i) {
        if (MT % kXRowStep == 0 || xr0 + i * kXRowStep < MT) {
          // Padded tokens and the k tail read zeros.
          const bool valid = xr0 + i * kXRowStep < load_span.m && kk < p.k;
          CpAsync16(dst + C::kWBytes + x_offset + i * kXRowStep * 128,
                    valid ? src + static_cast<int64_t>(i) * kXRowStep * p.k * kElemBytes : x_base, valid);
        }
      }
    }
  };
  auto advance_load = [&] {
    if (++load_kstep == ks) {
      load_kstep = 0;
      ++load_tile;
      if (load_tile * static_cast<int64_t>(ks) < p.total_steps) load_span = SpanOf(p, load_tile);
    }
  };

  constexpr int kAhead = C::kStages - C::kLag;  // slices requested ahead of the one computed
  // Prologue: weight slices first (before the wait, overlapping the previous kernel's tail).
  {
    const int tile0 = load_tile, kstep0 = load_kstep;
    const TileSpan span0 = load_span;
    for (int j = 0; j < kAhead; ++j) {
      if (j < count) load(j, true, false);
      advance_load();
    }
    load_tile = tile0;
    load_kstep = kstep0;
    load_span = span0;
  }
  PdlWait();
  PdlLaunchDependents();
  for (int j = 0; j < kAhead; ++j) {
    if (j < count) load(j, false, true);
    advance_load();
    CpAsyncCommit();
  }

  float acc[C::kFragsM][4];
  auto zero_acc = [&] {
#pragma unroll
    for (int b = 0; b < C::kFragsM; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[b][e] = 0.0f;
  };
  zero_acc();

  int64_t seg_begin = begin;
  int tile = static_cast<int>(begin / ks), kstep = static_cast<int>(begin % ks);
  const int group = warp >> 2;
  for (int j = 0; j < count; ++j) {
    CpAsyncWait<kAhead - 1>();
    FenceProxyAsync();  // cp.async wrote it; wgmma reads through the async proxy
    // Slice j visible to all; every warpgroup is done with the MMAs of slice j - kLag, whose
    // ring slot is refilled below (and, fp8, whose conversion buffer is rewritten).
    __syncthreads();
    if (j + kAhead < count) load(j + kAhead, true, true);
    advance_load();
    CpAsyncCommit();

    const uint32_t stage = ring_base + (j % C::kStages) * C::kStageBytes;
    const uint32_t x_base = stage + C::kWBytes;
    uint32_t w_base = stage;
    if constexpr (C::kConverted) {
      w_base = smem_base + (kOverlap ? (j & 1) : 0) * C::kConvBytes;
      // Own rows of the raw codes -> bf16 in the swizzled layout (16 codes = 2 chunks each).
#pragma unroll
      for (int i = 0; i < kBN / kWRowStep; ++i) {
        const int row = wr0 + i * kWRowStep;
        uint4 codes;
        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(codes.x), "=r"(codes.y), "=r"(codes.z), "=r"(codes.w)
                     : "r"(stage + w_offset + i * kWRowStep * kBK));
        const uint4 lo = CodesToBf16(codes.x, codes.y), hi = CodesToBf16(codes.z, codes.w);
        const uint32_t d0 = w_base + Swizzled<kBN>(row, 2 * wchunk), d1 = w_base + Swizzled<kBN>(row, 2 * wchunk + 1);
        asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(d0), "r"(lo.x), "r"(lo.y), "r"(lo.z), "r"(lo.w)
                     : "memory");
        asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(d1), "r"(hi.x), "r"(hi.y), "r"(hi.z), "r"(hi.w)
                     : "memory");
      }
      FenceProxyAsync();  // ordinary stores that wgmma reads next
      __syncthreads();
    }
    WgmmaFence();
    if constexpr (C::kX8) {
      // One 128-byte swizzle row per 128 k: 32 codes (32 bytes) per instruction.
#pragma unroll
      for (int k32 = 0; k32 < kBK / 32; ++k32) {
        Wgmma64xNE4m3<MT>(acc, WgmmaDesc(w_base + group * 64 * 128 + k32 * 32), WgmmaDesc(x_base + k32 * 32));
      }
    } else {
#pragma unroll
      for (int k16 = 0; k16 < kBK / 16; ++k16) {
        const uint32_t block = k16 >> 2, in_block = (k16 & 3) * 32;
        Wgmma64xN<MT>(acc, WgmmaDesc(w_base + (block * kBN + group * 64) * 128 + in_block),
                      WgmmaDesc(x_base + block * MT * 128 + in_block));
      }
    }
    WgmmaCommit();
    if (kstep == ks - 1 || j == count - 1) {
      WgmmaWait<0>();
      const int64_t seg_end = begin + j + 1;
      const TileSpan span = SpanOf(p, tile);
      TileScales<MT> scales;
      LoadTokenScales<MT, C::kX8>(p, span, tid, scales);
      LoadColScales<MT, kFp8>(p, span, tid, scales);
      FinishTile<MT, kFp8, C::kX8, kF32Out>(p, acc, tile, span, seg_begin, seg_end, begin, cta, grid, tid, &s_last,
                                            scales);
      zero_acc();
      seg_begin = seg_end;
    } else {
      WgmmaWait<C::kLag - 1>();
    }
    if (++kstep == ks) {
      kstep = 0;
      ++tile;
    }
  }
  CpAsyncWait<0>();
}

template <int MT, Operands kOps, bool kOverlap, bool kF32Out>
cudaError_t OptIn() {
  return cudaFuncSetAttribute(SkinnyKernel<MT, kOps, kOverlap, kF32Out>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              Config<MT, kOps, kOverlap>::kSmemBytes);
}

template <Operands kOps, bool kF32Out>
cudaError_t OptInAll() {
  if constexpr (kOps != Operands::kW8A16) {
    if (const cudaError_t err = TmaOptInAll<kOps, kF32Out>(); err != cudaSuccess) return err;
  }
  for (cudaError_t err : {OptIn<16, kOps, false, kF32Out>(), OptIn<32, kOps, false, kF32Out>(),
                          OptIn<64, kOps, false, kF32Out>(), OptIn<128, kOps, false, kF32Out>(),
                          OptIn<16, kOps, true, kF32Out>(), OptIn<32, kOps, true, kF32Out>(),
                          OptIn<64, kOps, true, kF32Out>()}) {
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <int MT, Operands kOps, bool kOverlap, bool kF32Out>
cudaError_t Launch(const Params& base, int sm_count, cudaStream_t stream, const CudaLaunchOptions& launch) {
  using C = Config<MT, kOps, kOverlap>;
  Params p = base;
  const int tiles = (p.n + kBN - 1) / kBN;
  p.ks = (p.k + kBK - 1) / kBK;
  p.tiles_per_problem = tiles;
  p.total_steps = static_cast<int64_t>(tiles) * p.ks * (p.problems != nullptr ? p.num_problems : 1);
  const int grid = static_cast<int>(std::min<int64_t>(sm_count, p.total_steps));
  return LaunchPdl(launch, SkinnyKernel<MT, kOps, kOverlap, kF32Out>, dim3(grid), dim3(kThreads), C::kSmemBytes,
                   stream, p);
}

// Token tile by m, then the pipeline.
template <Operands kOps, bool kF32Out>
cudaError_t Dispatch(const Params& p, int sm_count, SkinnyPipeline pipeline, cudaStream_t stream,
                     const CudaLaunchOptions& launch) {
  if constexpr (kOps != Operands::kW8A16) {
    if (pipeline == SkinnyPipeline::kTma) return DispatchTma<kOps, kF32Out>(p, sm_count, stream, launch);
  }
  const bool overlap = pipeline != SkinnyPipeline::kSerial;  // W8A16 runs kTma as kOverlapped
#define KVTIER_SKINNY_CASE(MT)                                                               \
  return overlap ? Launch<MT, kOps, true, kF32Out>(p, sm_count, stream, launch)             \
                 : Launch<MT, kOps, false, kF32Out>(p, sm_count, stream, launch)
  if (p.m <= 16) KVTIER_SKINNY_CASE(16);
  if (p.m <= 32) KVTIER_SKINNY_CASE(32);
  if (p.m <= 64) KVTIER_SKINNY_CASE(64);
  // At 128 tokens two slices of overlap leave too few ring stages: serial only.
  return Launch<128, kOps, false, kF32Out>(p, sm_count, stream, launch);
#undef KVTIER_SKINNY_CASE
}

// What every entry point shares: `p` holds the operands; the workspace (counters, then the
// partial slots: skinny_gemm.h) and the shape go in, then the launch for the token tile and
// the pipeline.
template <Operands kOps, bool kF32Out>
cudaError_t Run(Params p, void* workspace, int m, int64_t k, int64_t n, int sm_count, SkinnyPipeline pipeline,
                cudaStream_t stream, const CudaLaunchOptions& launch) {
  p.counters = static_cast<int*>(workspace);
  p.partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  p.m = m;
  p.k = static_cast<int>(k);
  p.n = static_cast<int>(n);
  const cudaError_t err = Dispatch<kOps, kF32Out>(p, sm_count, pipeline, stream, launch);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

// The grouped entry points' checks and parameters (skinny_gemm.h SkinnyGemmGrouped); false
// where the arguments are out of range.
inline bool GroupedParams(const bf16* x, const void* w, const int4* problems, int num_problems, int64_t n,
                          Params& p) {
  if (problems == nullptr || num_problems < 1) return false;
  const int64_t tiles = (n + kBN - 1) / kBN;
  if (tiles < 1 || static_cast<int64_t>(num_problems) * tiles > kMaxTiles) return false;
  p.x = x;
  p.w = w;
  p.problems = problems;
  p.num_problems = num_problems;
  return true;
}

cudaError_t Fp8Init();
cudaError_t W8A8Init();

}  // namespace kvtier::cuda::skinny

#endif  // KVTIER_BACKEND_CUDA_SKINNY_GEMM_KERNEL_CUH_
