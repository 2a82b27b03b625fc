// Skinny tensor-core GEMM (decode batches of up to 128 rows): out(m, n) = x(m, k) * w(n, k)^T.
//
// Why this shape of kernel. At m <= 128 the weights are the traffic (x is at most 3.5 MB and
// stays in L2), so the kernel streams each weight byte from HBM exactly once and keeps many
// bytes in flight on every SM; the arithmetic (m FLOPs per weight byte, ~0.5 PFLOP/s at
// m = 128 and 4 TB/s) goes to the tensor cores.
//  - Operands: the weight tile is the MMA's A (M side: 64 rows per warpgroup for wgmma, 16
//    per warp for mma.sync), x the B side, so the token dimension is the MMA's N: m pads to
//    the token tile MT (16, 32, 64, 128). Both are k-contiguous ("K-major") in memory and in
//    shared memory.
//  - Pipeline: a CTA (8 warps) tile is 128 weight rows x MT tokens; each step loads a
//    128-wide k slice of both (256 contiguous bytes per weight row) with 16-byte cp.async
//    into a 3..5-stage ring (~100 KB of weights in flight per SM), stored in the 128-byte
//    swizzled layout that wgmma descriptors read (and ldmatrix reads without conflicts).
//  - MMA: wgmma.m64nMTk16 (sm_90a) with both operands from shared memory. The same kernel
//    with mma.sync m16n8k16 + ldmatrix (used where wgmma is not compiled) streams as fast at
//    m <= 32 but loses 5-20% at m = 64 and ~20% at m = 128 (ldmatrix traffic through the
//    register file). Measured choices (bench/micro/skinny_gemm_bench.cu, H200): a 128-wide
//    k step beats 64 by 5-10% (fewer barriers per byte, longer contiguous runs); BN = 256 or
//    2 CTAs per SM were slower; an L2 bulk prefetch of upcoming weight slices was 30-40%
//    slower; an L2 evict-first hint on the weight copies made ptxas emit an illegal LDGSTS
//    (bad descriptor register) at MT = 128 on sm_90a, so there is none.
//  - Work split ("stream-K"): the steps of all tiles (tiles x k/128) are cut into one
//    contiguous range per CTA, one CTA per SM, so every SM streams the same number of weight
//    bytes whatever n is (n = 4096 has only 32 tiles of 128 rows for 132 SMs) and there is
//    no tail wave. A range covering a whole tile writes it directly; a partly covered tile
//    is finished by whichever of its contributing CTAs arrives last (per-tile counter in
//    the workspace): each contributor stores its fp32 partial, the last one adds the others
//    and writes out, then resets the counter. One launch, no second pass, graph-safe.
//  - PDL: the first weight slices are requested before PdlWait (weights never depend on the
//    previous kernel); x and the workspace are touched only after it.
//  - Where it stands (H200, weights from HBM, us per call, skinny_gemm_test): on par with or
//    faster than cublasGemmEx at m <= 32 on every Llama-3-8B shape and at m = 64 on gate_up,
//    down and the LM head; 10-20% slower at m = 64 on qkv and o, 25-35% slower at m = 128.
//    Not yet the >= 3.3 TB/s everywhere that was the goal; see the notes in the report.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/pdl.h"
#include "../launch_env.h"
#include "skinny_gemm.h"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kSmemBudget = 200 * 1024;
constexpr int kMaxStages = 8;
// Tile counters live at the start of the workspace, at a fixed size (so calls of different n
// agree on where they are): enough for n up to kMaxTiles * 128 (BN is 128 in every dispatched
// configuration).
constexpr int kMaxTiles = 16384;
constexpr size_t kCounterBytes = kMaxTiles * sizeof(int);

struct SkinnyParams {
  const bf16* x;
  const bf16* w;
  void* out;
  float* partials;  // 2 slots per CTA of BN * MT floats (a range has at most 2 partial tiles)
  int* counters;    // one per tile, zero between calls
  int m, k, n;
  int ks;           // k steps per tile
  int64_t total_steps;
};

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

[[maybe_unused]] __device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                           uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

[[maybe_unused]] __device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Offset of 16-byte chunk `chunk` of row `row` in a tile of ROWS rows: the tile is stored as
// column blocks of 64 k (128 bytes per row, so a block is ROWS x 128 B) and inside a block
// chunk c of row r sits at c ^ (r % 8). This is the 128-byte-swizzled K-major layout that
// wgmma descriptors describe (block bases 1024-byte aligned), and it keeps ldmatrix
// conflict-free (the 8 rows an ldmatrix reads at one logical chunk hit 8 bank groups).
template <int ROWS>
__device__ __forceinline__ uint32_t Swizzled(int row, int chunk) {
  return static_cast<uint32_t>((((chunk >> 3) * ROWS + row) << 7) + (((chunk & 7) ^ (row & 7)) << 4));
}

// wgmma (warpgroup MMA) exists only in sm_90a code; elsewhere the wgmma configurations run
// the mma.sync path instead (same tiling, same results, slower at m >= 64).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVTIER_SKINNY_WGMMA 1
#else
#define KVTIER_SKINNY_WGMMA 0
#endif

// wgmma shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 B apart.
__device__ __forceinline__ uint64_t WgmmaDesc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}
__device__ __forceinline__ void WgmmaFence() {
#if KVTIER_SKINNY_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaCommit() {
#if KVTIER_SKINNY_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaWaitAll() {
#if KVTIER_SKINNY_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }


[[maybe_unused]] __device__ __forceinline__ void Wgmma64x16(float (&d)[2][4], uint64_t desc_a, uint64_t desc_b) {
#if KVTIER_SKINNY_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
      : "l"(desc_a), "l"(desc_b), "r"(1));
#endif
}
[[maybe_unused]] __device__ __forceinline__ void Wgmma64x32(float (&d)[4][4], uint64_t desc_a, uint64_t desc_b) {
#if KVTIER_SKINNY_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
      : "l"(desc_a), "l"(desc_b), "r"(1));
#endif
}
[[maybe_unused]] __device__ __forceinline__ void Wgmma64x64(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b) {
#if KVTIER_SKINNY_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(desc_a), "l"(desc_b), "r"(1));
#endif
}
[[maybe_unused]] __device__ __forceinline__ void Wgmma64x128(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b) {
#if KVTIER_SKINNY_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(desc_a), "l"(desc_b), "r"(1));
#endif
}
template <int N>
__device__ __forceinline__ void Wgmma64xN(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (N == 16) Wgmma64x16(d, desc_a, desc_b);
  if constexpr (N == 32) Wgmma64x32(d, desc_a, desc_b);
  if constexpr (N == 64) Wgmma64x64(d, desc_a, desc_b);
  if constexpr (N == 128) Wgmma64x128(d, desc_a, desc_b);
}

// First step of CTA `cta`'s range, and the CTA whose range holds step s.
__device__ __forceinline__ int64_t RangeBegin(int64_t cta, int64_t total, int64_t grid) {
  return cta * total / grid;
}
__device__ __forceinline__ int64_t StepOwner(int64_t s, int64_t total, int64_t grid) {
  return ((s + 1) * grid - 1) / total;
}

template <int MT, int BN, int BK, int WARPS_N, int CTAS>
struct SkinnyConfig {
  static constexpr int kChunks = BK / 8;             // 16-byte chunks per row and step
  static constexpr int kWarpsM = (kThreads / 32) / WARPS_N;
  static constexpr int kWarpRows = BN / WARPS_N;     // weight rows per warp
  static constexpr int kWarpTokens = MT / kWarpsM;   // tokens per warp
  static constexpr int kFragsN = kWarpRows / 16;     // m16 tiles over weight rows
  static constexpr int kFragsM = kWarpTokens / 8;    // n8 tiles over tokens
  static constexpr int kWBytes = BN * BK * 2;
  static constexpr int kXBytes = MT * BK * 2;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kStages = std::min(kMaxStages, kSmemBudget / CTAS / kStageBytes);
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + base alignment slack
  static constexpr int kFrags = kFragsN * kFragsM;   // float4 accumulators per thread
  static_assert(kWarpRows % 16 == 0 && kWarpTokens % 16 == 0, "warp tile");
  static_assert(kStages >= 3, "pipeline depth");
};

template <int MT, int BN, int BK, int WARPS_N, int CTAS, bool kWgmma, bool kF32Out>
__global__ void __launch_bounds__(kThreads, CTAS) SkinnyGemmKernel(SkinnyParams p) {
  using C = SkinnyConfig<MT, BN, BK, WARPS_N, CTAS>;
  static_assert(!kWgmma || (WARPS_N == 8 && BN == 128), "wgmma: one warpgroup per 64 weight rows");
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ int s_last;
  const uint32_t smem_base = (SmemAddr(smem) + 1023u) & ~1023u;  // swizzle atoms: 1024 B
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_n = warp % WARPS_N, warp_m = warp / WARPS_N;
  const int64_t grid = gridDim.x, cta = blockIdx.x;
  const int64_t begin = RangeBegin(cta, p.total_steps, grid);
  const int count = static_cast<int>(RangeBegin(cta + 1, p.total_steps, grid) - begin);
  const int ks = p.ks;


  // Each thread copies the same 16-byte chunk column of rows r0, r0 + kRowStep, ... of both
  // tiles every step; only the tile (row base) and the k offset change, tracked incrementally
  // (no divisions in the loop: index math, not bandwidth, limited the first version).
  constexpr int kRowStep = kThreads / C::kChunks;
  const int r0 = tid / C::kChunks, chunk = tid % C::kChunks;
  // Rows r0 + i * kRowStep (kRowStep a multiple of 8) swizzle alike: 128 B apart.
  const uint32_t w_offset = Swizzled<BN>(r0, chunk), x_offset = Swizzled<MT>(r0, chunk);
  int load_tile = static_cast<int>(begin / ks), load_kstep = static_cast<int>(begin % ks);
  auto load = [&](int j, bool weights, bool activations) {
    const uint32_t dst = smem_base + (j % C::kStages) * C::kStageBytes;
    const int kk = load_kstep * BK + chunk * 8;
    if (weights) {
      const int64_t row = static_cast<int64_t>(load_tile) * BN + r0;
      const bf16* src = p.w + row * p.k + kk;
#pragma unroll
      for (int i = 0; i < BN / kRowStep; ++i) {
        const bool valid = row + i * kRowStep < p.n && kk < p.k;
        CpAsync16(dst + w_offset + i * kRowStep * 128, valid ? src + static_cast<int64_t>(i) * kRowStep * p.k : p.w,
                  valid);
      }
    }
    if (activations) {
      const bf16* src = p.x + static_cast<int64_t>(r0) * p.k + kk;
#pragma unroll
      for (int i = 0; i < (MT + kRowStep - 1) / kRowStep; ++i) {
        if (MT % kRowStep == 0 || r0 + i * kRowStep < MT) {
          // Padded tokens and the k tail read zeros.
          const bool valid = r0 + i * kRowStep < p.m && kk < p.k;
          CpAsync16(dst + C::kWBytes + x_offset + i * kRowStep * 128,
                    valid ? src + static_cast<int64_t>(i) * kRowStep * p.k : p.x, valid);
        }
      }
    }
  };
  auto advance_load = [&] {
    if (++load_kstep == ks) {
      load_kstep = 0;
      ++load_tile;
    }
  };

  // Prologue: weight slices first (before the wait, overlapping the previous kernel's tail).
  {
    const int tile0 = load_tile, kstep0 = load_kstep;
    for (int j = 0; j < C::kStages - 1; ++j) {
      if (j < count) load(j, true, false);
      advance_load();
    }
    load_tile = tile0;
    load_kstep = kstep0;
  }
  PdlWait();
  PdlLaunchDependents();
  for (int j = 0; j < C::kStages - 1; ++j) {
    if (j < count) load(j, false, true);
    advance_load();
    CpAsyncCommit();
  }

  float acc[C::kFragsN][C::kFragsM][4];
  auto zero_acc = [&] {
#pragma unroll
    for (int a = 0; a < C::kFragsN; ++a)
#pragma unroll
      for (int b = 0; b < C::kFragsM; ++b)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.0f;
  };
  zero_acc();

  // Finishes tile `tile` after the steps [seg_begin, seg_end) of it were accumulated.
  auto epilogue = [&](int64_t tile, int64_t seg_begin, int64_t seg_end) {
    const int64_t tile_begin = tile * ks, tile_end = tile_begin + ks;
    if (seg_begin != tile_begin || seg_end != tile_end) {
      const int64_t slot = 2 * cta + (seg_begin == begin ? 0 : 1);
      float4* mine = reinterpret_cast<float4*>(p.partials) + slot * (C::kFrags * kThreads);
#pragma unroll
      for (int a = 0; a < C::kFragsN; ++a)
#pragma unroll
        for (int b = 0; b < C::kFragsM; ++b)
          __stcg(mine + (a * C::kFragsM + b) * kThreads + tid,
                 make_float4(acc[a][b][0], acc[a][b][1], acc[a][b][2], acc[a][b][3]));
      __threadfence();
      __syncthreads();
      const int64_t first = StepOwner(tile_begin, p.total_steps, grid);
      const int64_t last = StepOwner(tile_end - 1, p.total_steps, grid);
      if (tid == 0) {
        const int arrived = atomicAdd(p.counters + tile, 1);
        s_last = arrived == static_cast<int>(last - first);
        if (s_last) p.counters[tile] = 0;  // every contributor has arrived: ready for next call
      }
      __syncthreads();
      if (!s_last) return;
      __threadfence();
      for (int64_t other = first; other <= last; ++other) {
        if (other == cta) continue;
        const int64_t other_slot =
            2 * other + (RangeBegin(other, p.total_steps, grid) >= tile_begin ? 0 : 1);
        const float4* part =
            reinterpret_cast<const float4*>(p.partials) + other_slot * (C::kFrags * kThreads);
#pragma unroll
        for (int a = 0; a < C::kFragsN; ++a)
#pragma unroll
          for (int b = 0; b < C::kFragsM; ++b) {
            const float4 v = __ldcg(part + (a * C::kFragsM + b) * kThreads + tid);
            acc[a][b][0] += v.x;
            acc[a][b][1] += v.y;
            acc[a][b][2] += v.z;
            acc[a][b][3] += v.w;
          }
      }
    }
    // Accumulator element e of fragment (a, b): weight row (output column) lane / 4 (+ 8
    // for e >= 2), token 2 * (lane % 4) (+ 1 for odd e).
#pragma unroll
    for (int a = 0; a < C::kFragsN; ++a) {
#pragma unroll
      for (int b = 0; b < C::kFragsM; ++b) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t col = tile * BN + warp_n * C::kWarpRows + a * 16 + (lane >> 2) + (e >> 1) * 8;
          const int token = warp_m * C::kWarpTokens + b * 8 + (lane & 3) * 2 + (e & 1);
          if (token < p.m && col < p.n) {
            const int64_t at = static_cast<int64_t>(token) * p.n + col;
            if constexpr (kF32Out) {
              static_cast<float*>(p.out)[at] = acc[a][b][e];
            } else {
              static_cast<bf16*>(p.out)[at] = __float2bfloat16(acc[a][b][e]);
            }
          }
        }
      }
    }
  };

  int64_t seg_begin = begin;
  int tile = static_cast<int>(begin / ks), kstep = static_cast<int>(begin % ks);
  for (int j = 0; j < count; ++j) {
    CpAsyncWait<C::kStages - 2>();
    if constexpr (kWgmma && KVTIER_SKINNY_WGMMA) FenceProxyAsync();  // cp.async wrote it; wgmma reads via the async proxy
    __syncthreads();  // slice j visible to all; everyone is done with the slot refilled below
    if (j + C::kStages - 1 < count) load(j + C::kStages - 1, true, true);
    advance_load();
    CpAsyncCommit();

    const uint32_t w_base = smem_base + (j % C::kStages) * C::kStageBytes;
    const uint32_t x_base = w_base + C::kWBytes;
    if constexpr (kWgmma && KVTIER_SKINNY_WGMMA) {
      // One warpgroup per 64 weight rows; the tensor cores read both operands from shared
      // memory (no ldmatrix traffic through registers, which limited mma.sync at m >= 64).
      const int group = warp >> 2;
      WgmmaFence();
#pragma unroll
      for (int k16 = 0; k16 < BK / 16; ++k16) {
        const uint32_t block = k16 >> 2, in_block = (k16 & 3) * 32;
        Wgmma64xN<MT>(acc[0], WgmmaDesc(w_base + (block * BN + group * 64) * 128 + in_block),
                      WgmmaDesc(x_base + block * MT * 128 + in_block));
      }
      WgmmaCommit();
      WgmmaWaitAll();
    } else {
    // Fragments are double-buffered when registers allow (the ldmatrix of slice k16 + 1 is
    // issued before the mma of slice k16; the asm statements keep program order).
    constexpr int kBufs = C::kFrags <= 16 ? 2 : 1;
    uint32_t a_frag[kBufs][C::kFragsN][4];
    uint32_t b_frag[kBufs][C::kFragsM][2];
    auto load_frags = [&](int k16, int buf) {
#pragma unroll
      for (int a = 0; a < C::kFragsN; ++a) {
        // Matrices: rows 0-7 / 8-15 at k 0-7, then rows 0-7 / 8-15 at k 8-15.
        const int row = warp_n * C::kWarpRows + a * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        LdMatrixX4(w_base + Swizzled<BN>(row, k16 * 2 + (lane >> 4)), a_frag[buf][a][0],
                   a_frag[buf][a][1], a_frag[buf][a][2], a_frag[buf][a][3]);
      }
#pragma unroll
      for (int b = 0; b < C::kFragsM; b += 2) {
        // Matrices: tokens 0-7 at k 0-7 / 8-15, then tokens 8-15 at k 0-7 / 8-15.
        const int token = warp_m * C::kWarpTokens + b * 8 + (lane & 7) + (lane >> 4) * 8;
        LdMatrixX4(x_base + Swizzled<MT>(token, k16 * 2 + ((lane >> 3) & 1)), b_frag[buf][b][0],
                   b_frag[buf][b][1], b_frag[buf][b + 1][0], b_frag[buf][b + 1][1]);
      }
    };
    auto mma_all = [&](int buf) {
#pragma unroll
      for (int a = 0; a < C::kFragsN; ++a)
#pragma unroll
        for (int b = 0; b < C::kFragsM; ++b) Mma16816(acc[a][b], a_frag[buf][a], b_frag[buf][b]);
    };
    if constexpr (kBufs == 2) {
      load_frags(0, 0);
#pragma unroll
      for (int k16 = 0; k16 < BK / 16; ++k16) {
        if (k16 + 1 < BK / 16) load_frags(k16 + 1, (k16 + 1) & 1);
        mma_all(k16 & 1);
      }
    } else {
#pragma unroll
      for (int k16 = 0; k16 < BK / 16; ++k16) {
        load_frags(k16, 0);
        mma_all(0);
      }
    }

    }
    if (kstep == ks - 1 || j == count - 1) {
      const int64_t seg_end = begin + j + 1;
      epilogue(tile, seg_begin, seg_end);
      zero_acc();
      seg_begin = seg_end;
    }
    if (++kstep == ks) {
      kstep = 0;
      ++tile;
    }
  }
  CpAsyncWait<0>();
}

int NumSms() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  static int cached[64] = {};
  if (device >= 0 && device < 64 && cached[device] > 0) return cached[device];
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  if (device >= 0 && device < 64) cached[device] = sms;
  return sms;
}

template <int MT, int BN, int BK, int WARPS_N, int CTAS, bool kWgmma, bool kF32Out>
cudaError_t LaunchSkinny(const bf16* x, const bf16* w, int m, int k, int n, void* out,
                         void* workspace, cudaStream_t stream) {
  using C = SkinnyConfig<MT, BN, BK, WARPS_N, CTAS>;
  auto* kernel = SkinnyGemmKernel<MT, BN, BK, WARPS_N, CTAS, kWgmma, kF32Out>;
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (attr_err != cudaSuccess) return attr_err;
  const int sms = NumSms();
  if (sms <= 0) return cudaErrorInvalidDevice;
  const int tiles = (n + BN - 1) / BN;
  SkinnyParams p{};
  p.x = x;
  p.w = w;
  p.out = out;
  p.m = m;
  p.k = k;
  p.n = n;
  p.ks = (k + BK - 1) / BK;
  p.total_steps = static_cast<int64_t>(tiles) * p.ks;
  p.counters = static_cast<int*>(workspace);
  p.partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  const int grid = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(sms) * CTAS, p.total_steps));
  const cudaError_t err =
      LaunchPdl(LaunchOptionsFromEnv(), kernel, dim3(grid), dim3(kThreads), C::kSmemBytes,
                stream, p);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

// Token tile per m, and the CTA/warp tiling for it (measured choices: bench/micro/skinny_gemm_bench.cu).
template <bool kF32Out>
cudaError_t Dispatch(const bf16* x, const bf16* w, int m, int k, int n, void* out,
                     void* workspace, cudaStream_t stream) {
  if (m <= 16) return LaunchSkinny<16, 128, 128, 8, 1, true, kF32Out>(x, w, m, k, n, out, workspace, stream);
  if (m <= 32) return LaunchSkinny<32, 128, 128, 8, 1, true, kF32Out>(x, w, m, k, n, out, workspace, stream);
  if (m <= 64) return LaunchSkinny<64, 128, 128, 8, 1, true, kF32Out>(x, w, m, k, n, out, workspace, stream);
  return LaunchSkinny<128, 128, 128, 8, 1, true, kF32Out>(x, w, m, k, n, out, workspace, stream);
}

}  // namespace

bool SkinnyGemmSupported(int m, int k, int n) {
  return m >= 1 && m <= kSkinnyGemmMaxRows && k > 0 && n > 0 && k % 8 == 0 && n % 8 == 0 &&
         n <= kMaxTiles * 128;
}

size_t SkinnyGemmWorkspaceBytes(int max_m, int max_n) {
  if (max_m < 1 || max_n < 1) return 0;
  const int mt = max_m <= 16 ? 16 : max_m <= 32 ? 32 : max_m <= 64 ? 64 : 128;
  // Two partial slots (BN x MT floats, BN = 128) per CTA, one CTA per SM.
  return kCounterBytes + 2 * static_cast<size_t>(NumSms()) * 128 * mt * sizeof(float);
}

cudaError_t SkinnyGemm(const bf16* x, const bf16* w, int m, int k, int n, void* out,
                       bool out_f32, void* workspace, cudaStream_t stream) {
  if (!SkinnyGemmSupported(m, k, n) || workspace == nullptr || out == nullptr ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  return out_f32 ? Dispatch<true>(x, w, m, k, n, out, workspace, stream)
                 : Dispatch<false>(x, w, m, k, n, out, workspace, stream);
}

}  // namespace kvtier::cuda
