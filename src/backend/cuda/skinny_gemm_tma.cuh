// The skinny projection's TMA pipeline (SkinnyPipeline::kTma; skinny_gemm.h), for bf16 and
// W8A8 operands. Same tiles, stream-K ranges and finish as the cp.async pipelines
// (skinny_gemm_kernel.cuh); what differs is who moves the bytes:
//  - One producer warp (one elected thread) issues each step's loads as TMA box copies (two
//    per operand for bf16, one for codes), which land already in wgmma's 128-byte swizzled
//    layout and signal a per-slot "full" mbarrier with their byte count. The eight MMA warps
//    wait on that barrier only, and give a slot back through its "empty" mbarrier as soon as
//    their wgmma on it has completed. No CTA-wide barrier per step, no thread spends issue
//    slots on copies, and the whole shared memory is ring: the producer runs as far ahead as
//    the slots allow.
//  - Rows of x past m and the k tail are zero-filled by the copy engine (the maps' bounds).
//  - PDL: the weight boxes of the first slots are requested before the wait on the previous
//    kernel; x, the workspace and the output only after it.
#ifndef KVTIER_BACKEND_CUDA_SKINNY_GEMM_TMA_CUH_
#define KVTIER_BACKEND_CUDA_SKINNY_GEMM_TMA_CUH_

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/skinny_gemm_common.cuh"
#include "backend/cuda/skinny_gemm_finish.cuh"
#include "backend/cuda/skinny_tma_map.h"
#include "backend/cuda/wgmma.cuh"

namespace kvtier::cuda::skinny {

constexpr int kTmaThreads = kThreads + 32;          // two MMA warpgroups + the producer warp
constexpr int kTmaSmemBudget = 225 * 1024;          // the ring (227 KB per block at most)
constexpr int kTmaMaxStages = 16;

struct TmaParams {
  CUtensorMap w_map;  // (n, k) weights, boxes of kBN rows
  CUtensorMap x_map;  // (m, k) activations, boxes of MT rows
  Params p;
  int hints;          // L2 eviction hints: weights first out, x last (SkinnyTmaTuning)
  int lookahead;      // steps in flight per CTA, 2..the ring's slots (SkinnyTmaTuning)
};

// kRowBytes: bytes of each weight row per step (kBK * element size for the cp.async
// pipelines); the k of a step is kRowBytes / element size.
template <int MT, Operands kOps, int kRowBytes>
struct TmaConfig {
  static_assert(kOps != Operands::kW8A16, "W8A16 converts codes in shared memory: cp.async pipelines only");
  static_assert(kRowBytes % 128 == 0, "whole 128-byte swizzle rows");
  static constexpr bool kCodes = kOps == Operands::kW8A8;
  static constexpr int kElem = kCodes ? 1 : 2;
  static constexpr int kStepK = kRowBytes / kElem;
  static constexpr int kBoxes = kRowBytes / 128;  // 128-byte-wide boxes per operand and step
  static constexpr int kBoxElems = 128 / kElem;
  static constexpr int kWBytes = kBN * kRowBytes;
  static constexpr int kXBytes = MT * kRowBytes;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kStages = std::min(kTmaMaxStages, kTmaSmemBudget / kStageBytes);
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + alignment slack
  static_assert(kStages >= 3, "at least three slots in the ring");
};

// One box of `map` at (element c0 of k, row c1) into shared memory at dst; completes on bar.
__device__ __forceinline__ void TmaLoad(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar,
                                        uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
      : "memory");
}

template <int MT, Operands kOps, bool kF32Out, int kRowBytes>
__global__ void __launch_bounds__(kTmaThreads, 1) SkinnyTmaKernel(const __grid_constant__ TmaParams tp) {
  using C = TmaConfig<MT, kOps, kRowBytes>;
  const Params& p = tp.p;
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t full_bars[C::kStages], empty_bars[C::kStages];
  __shared__ int s_last;
  const uint32_t ring = (SmemAddr(smem) + 1023u) & ~1023u;  // swizzle atoms: 1024 B
  const uint32_t full0 = SmemAddr(full_bars), empty0 = SmemAddr(empty_bars);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t grid = gridDim.x, cta = blockIdx.x;
  const int64_t begin = RangeBegin(cta, p.total_steps, grid);
  const int count = static_cast<int>(RangeBegin(cta + 1, p.total_steps, grid) - begin);
  const int ks = p.ks;
  int64_t* const trace = p.trace == nullptr ? nullptr : p.trace + cta * kSkinnyTraceSlots;

  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      MbarInit(full0 + 8 * s, 1);                  // the producer's arrive (+ the copies' bytes)
      MbarInit(empty0 + 8 * s, kThreads / 32);     // one arrive per MMA warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp == kThreads / 32) {  // the producer warp
    if (lane == 0) {
      if (trace != nullptr) trace[kTraceProducerEntryNs] = GlobalTimerNs();
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tp.w_map)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tp.x_map)) : "memory");
      // Weights are read once: first out of L2 (tp.hints); x is read by every CTA: kept.
      uint64_t stream_policy, keep_policy;
      if (tp.hints) {
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(stream_policy));
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(keep_policy));
      } else {
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(stream_policy));
        keep_policy = stream_policy;
      }
      auto load_w = [&](int j) {
        const int64_t step = begin + j;
        const int tile = static_cast<int>(step / ks), kstep = static_cast<int>(step % ks);
        const uint32_t dst = ring + (j % C::kStages) * C::kStageBytes;
#pragma unroll
        for (int b = 0; b < C::kBoxes; ++b)
          TmaLoad(dst + b * kBN * 128, &tp.w_map, kstep * C::kStepK + b * C::kBoxElems, tile * kBN,
                  full0 + 8 * (j % C::kStages), stream_policy);
      };
      auto load_x = [&](int j) {
        const int kstep = static_cast<int>((begin + j) % ks);
        const uint32_t dst = ring + (j % C::kStages) * C::kStageBytes + C::kWBytes;
#pragma unroll
        for (int b = 0; b < C::kBoxes; ++b)
          TmaLoad(dst + b * MT * 128, &tp.x_map, kstep * C::kStepK + b * C::kBoxElems, 0, full0 + 8 * (j % C::kStages),
                  keep_policy);
      };
      const int depth = tp.lookahead;
      const int first = count < depth ? count : depth;
      for (int j = 0; j < first; ++j) {
        MbarExpectTx(full0 + 8 * j, C::kStageBytes);
        load_w(j);
      }
      PdlWait();
      for (int j = 0; j < first; ++j) load_x(j);
      for (int j = first; j < count; ++j) {
        const int s = j % C::kStages;
        // Step j waits for step j - depth to be consumed. The MMA warps give slots back in
        // step order, so slot s's previous occupant (step j - kStages, no later) is free too;
        // and that slot's barrier is at most one phase past the one waited on (its next phase
        // needs step j - depth + kStages, not issued yet), so the parity names it.
        const int back = j - depth;
        MbarWait(empty0 + 8 * (back % C::kStages), (back / C::kStages) & 1);
        MbarExpectTx(full0 + 8 * s, C::kStageBytes);
        load_w(j);
        load_x(j);
      }
    }
    PdlLaunchDependents();
    return;
  }

  // The MMA warps: the workspace and the output are touched only after the previous kernel.
  const bool stamp = trace != nullptr && tid == 0;
  if (stamp) trace[kTraceEntryNs] = GlobalTimerNs();
  PdlWait();
  PdlLaunchDependents();
  int64_t finish_ns = 0;
  FinishTimes times;
  if (stamp) {
    trace[kTracePdlDoneNs] = GlobalTimerNs();
    trace[kTraceSteps] = count;
  }
  float acc[MT / 8][4];
#pragma unroll
  for (int b = 0; b < MT / 8; ++b)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[b][e] = 0.0f;
  int64_t seg_begin = begin;
  int tile = static_cast<int>(begin / ks), kstep = static_cast<int>(begin % ks);
  const int group = warp >> 2;
  int held = -1;  // the slot whose wgmma may still be reading (given back one step later)
  TileScales<MT> scales;  // loaded early: the tokens' now, each tile's columns as its steps begin
  LoadTokenScales<MT, C::kCodes>(p, SpanOf(p, 0), tid, scales);  // one problem: every tile's tokens
  for (int j = 0; j < count; ++j) {
    const int s = j % C::kStages;
    if (j == 0 || kstep == 0) LoadColScales<MT, C::kCodes>(p, SpanOf(p, tile), tid, scales);
    MbarWait(full0 + 8 * s, (j / C::kStages) & 1);
    if (stamp && j == 0) trace[kTraceFirstDataNs] = GlobalTimerNs();
    const uint32_t w_base = ring + s * C::kStageBytes, x_base = w_base + C::kWBytes;
    WgmmaFence();
    // One instruction per 32 bytes of k (k32 codes or k16 bf16), four per 128-byte box.
#pragma unroll
    for (int i = 0; i < kRowBytes / 32; ++i) {
      const uint32_t block = i >> 2, in_block = (i & 3) * 32;
      const uint64_t a = WgmmaDesc(w_base + (block * kBN + group * 64) * 128 + in_block);
      const uint64_t b = WgmmaDesc(x_base + block * MT * 128 + in_block);
      if constexpr (C::kCodes) {
        Wgmma64xNE4m3<MT>(acc, a, b);
      } else {
        Wgmma64xN<MT>(acc, a, b);
      }
    }
    WgmmaCommit();
    if (kstep == ks - 1 || j == count - 1) {
      WgmmaWait<0>();
      if (lane == 0) {
        if (held >= 0) MbarArrive(empty0 + 8 * held);
        MbarArrive(empty0 + 8 * s);
      }
      held = -1;
      const int64_t seg_end = begin + j + 1;
      const int64_t finish_start = stamp ? GlobalTimerNs() : 0;
      if (stamp && j == count - 1) trace[kTraceLastStepNs] = finish_start;
      FinishTile<MT, C::kCodes, C::kCodes, kF32Out>(p, acc, tile, SpanOf(p, tile), seg_begin, seg_end, begin, cta,
                                                    grid, tid, &s_last, scales, stamp ? &times : nullptr);
      if (stamp) finish_ns += GlobalTimerNs() - finish_start;
#pragma unroll
      for (int b = 0; b < MT / 8; ++b)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[b][e] = 0.0f;
      seg_begin = seg_end;
    } else {
      WgmmaWait<1>();  // the previous step's wgmma is done: its slot goes back
      if (lane == 0 && held >= 0) MbarArrive(empty0 + 8 * held);
      held = s;
    }
    if (++kstep == ks) {
      kstep = 0;
      ++tile;
    }
  }
  if (stamp) {
    times.Write(trace);
    trace[kTraceFinishNs] = finish_ns;
    trace[kTraceExitNs] = GlobalTimerNs();
  }
}

template <int MT, Operands kOps, bool kF32Out, int kRowBytes>
cudaError_t TmaOptIn() {
  return cudaFuncSetAttribute(SkinnyTmaKernel<MT, kOps, kF32Out, kRowBytes>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, TmaConfig<MT, kOps, kRowBytes>::kSmemBytes);
}

// The row bytes per step each operand type is built for: bf16 256 (k 128, as the cp.async
// pipelines); codes 128 (k 128) or 256 (k 256).
template <Operands kOps, bool kF32Out>
cudaError_t TmaOptInAll() {
  for (cudaError_t err : {TmaOptIn<16, kOps, kF32Out, 256>(), TmaOptIn<32, kOps, kF32Out, 256>(),
                          TmaOptIn<64, kOps, kF32Out, 256>(), TmaOptIn<128, kOps, kF32Out, 256>()}) {
    if (err != cudaSuccess) return err;
  }
  if constexpr (kOps == Operands::kW8A8) {
    for (cudaError_t err : {TmaOptIn<16, kOps, kF32Out, 128>(), TmaOptIn<32, kOps, kF32Out, 128>(),
                            TmaOptIn<64, kOps, kF32Out, 128>(), TmaOptIn<128, kOps, kF32Out, 128>()}) {
      if (err != cudaSuccess) return err;
    }
  }
  return cudaSuccess;
}

// `base` complete but for the step count and the maps: encodes them (host work, cached per
// thread, captured with the launch in a graph), one CTA per SM.
template <int MT, Operands kOps, bool kF32Out, int kRowBytes>
cudaError_t LaunchTma(const Params& base, int sm_count, const SkinnyTmaTuning& tuning, cudaStream_t stream,
                      const CudaLaunchOptions& launch) {
  using C = TmaConfig<MT, kOps, kRowBytes>;
  TmaParams tp{};
  tp.p = base;
  tp.p.ks = (tp.p.k + C::kStepK - 1) / C::kStepK;
  tp.p.total_steps = static_cast<int64_t>((tp.p.n + kBN - 1) / kBN) * tp.p.ks;
  tp.hints = tuning.l2_hints ? 1 : 0;
  // At least 2: the MMA warps give a slot back one step late (held), so with one step in
  // flight the producer would wait for a release that waits for its next copy.
  tp.lookahead = tuning.lookahead <= 0 || tuning.lookahead >= C::kStages ? C::kStages : std::max(2, tuning.lookahead);
  tp.p.trace = CurrentSkinnyTrace();
  const int grid = static_cast<int>(std::min<int64_t>(sm_count, tp.p.total_steps));
  const void* x = C::kCodes ? static_cast<const void*>(tp.p.x8) : static_cast<const void*>(tp.p.x);
  if (!EncodeSkinnyTmaMap(&tp.w_map, tp.p.w, !C::kCodes, tp.p.n, tp.p.k, kBN, tuning.l2_promotion) ||
      !EncodeSkinnyTmaMap(&tp.x_map, x, !C::kCodes, tp.p.m, tp.p.k, MT, tuning.l2_promotion)) {
    return cudaErrorNotSupported;
  }
  return LaunchPdl(launch, SkinnyTmaKernel<MT, kOps, kF32Out, kRowBytes>, dim3(grid), dim3(kTmaThreads),
                   C::kSmemBytes, stream, tp);
}

template <Operands kOps, bool kF32Out, int kRowBytes>
cudaError_t DispatchTmaRows(const Params& p, int sm_count, const SkinnyTmaTuning& tuning, cudaStream_t stream,
                            const CudaLaunchOptions& launch) {
  if (p.m <= 16) return LaunchTma<16, kOps, kF32Out, kRowBytes>(p, sm_count, tuning, stream, launch);
  if (p.m <= 32) return LaunchTma<32, kOps, kF32Out, kRowBytes>(p, sm_count, tuning, stream, launch);
  if (p.m <= 64) return LaunchTma<64, kOps, kF32Out, kRowBytes>(p, sm_count, tuning, stream, launch);
  return LaunchTma<128, kOps, kF32Out, kRowBytes>(p, sm_count, tuning, stream, launch);
}

template <Operands kOps, bool kF32Out>
cudaError_t DispatchTma(const Params& p, int sm_count, cudaStream_t stream, const CudaLaunchOptions& launch) {
  const SkinnyTmaTuning tuning = CurrentSkinnyTmaTuning();
  if constexpr (kOps == Operands::kW8A8) {
    if (tuning.code_row_bytes == 128) return DispatchTmaRows<kOps, kF32Out, 128>(p, sm_count, tuning, stream, launch);
  }
  return DispatchTmaRows<kOps, kF32Out, 256>(p, sm_count, tuning, stream, launch);
}

}  // namespace kvtier::cuda::skinny

#endif  // KVTIER_BACKEND_CUDA_SKINNY_GEMM_TMA_CUH_
