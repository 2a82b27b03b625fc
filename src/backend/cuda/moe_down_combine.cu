// The decode path's down+combine (moe_decode.h, kernel 3).
#include <climits>
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/moe_decode.h"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

// Down+combine: a CTA per (row blockIdx.y, a few output columns), one warp per (route, C
// adjacent columns): warp w streams route w % top_k's down rows for its C columns, one
// contiguous stretch of the expert's weights. Each route's dot is the per-route GEMV's
// (ExpertGemvKernel, W = 1): lane l adds pieces l, l + 32, ... in ascending order, the same
// butterfly, the scale, the rounding to T. Then one thread per column adds the routes in
// ascending expert order with CombineStep, as CombineKernel does. The routing is known before
// the PDL wait (moe_decode.h), only the activations are not: the weights and each route's
// expert and weight are requested before it.
//
// Each CTA is a chain of dependent round trips (the routing, the weights, the activations, the
// combine), so a warp holds as many of its bytes in flight as its registers allow, by the length
// of an expert row:
//  - short rows (Qwen3-MoE's 768): C = 2, 4 or 8 adjacent rows, about kDownPieces 16-byte pieces
//    per lane, loaded in chunks, the first before the PDL wait;
//  - long rows (Mixtral's 14336): C = 1, the per-route GEMV's register pipeline (gemv::Stream);
//  - short rows where the CTA's rows fit in shared memory (MoeDownCombineParams::bulk): the
//    copy engine instead of registers (DownCombineBulkKernel).
constexpr int kDownWarps = 8;       // warps per CTA up to top_k 8
constexpr int kDownPieces = 16;     // C * P: a lane's pieces in flight on short rows
constexpr int kDownStreamPre = 4;   // the streamed path's pieces per lane ahead of the wait
// The bulk path: a CTA's weight rows in shared memory, at most kDownBulkBytes, so that
// kDownBulkCtas CTAs fit an SM and the whole grid (Qwen3-MoE's 512 CTAs) lands in one wave;
// at most kDownBulkLanePieces pieces of a row per lane (the activations are held in registers),
// top_k at most kDownWarps.
constexpr int kDownBulkBytes = 48 << 10;
constexpr int kDownBulkCtas = 4;
constexpr int kDownBulkLanePieces = 4;

// What a CTA's warps leave for the combine: each warp's route, expert, weight and C dots.
template <int C>
struct DownRoutes {
  float out[kMoeMaxTopK][C];  // groups * top_k <= kMoeMaxTopK warps
  int expert[kMoeMaxTopK];
  float weight[kMoeMaxTopK];
};

// Each column's combine, after the CTA's barrier: thread t adds column t's routes (group
// t / C, its column t % C) in ascending expert order (a row's experts are distinct: the next
// route is the one with the smallest expert above the last added).
template <typename T, int C>
__device__ __forceinline__ void CombineColumns(const DownRoutes<C>& routes, int top_k, int groups, int n,
                                               T* __restrict__ out) {
  if (threadIdx.x >= groups * C) return;
  const int g = threadIdx.x / C, j = threadIdx.x - g * C;
  const int col = (blockIdx.x * groups + g) * C + j;
  if (col >= n) return;
  const int w0 = g * top_k;
  float acc = 0.0f;
  int last = -1;
  for (int s = 0; s < top_k; ++s) {
    int next = INT32_MAX, at = 0;
    for (int r = 0; r < top_k; ++r) {
      const int e = routes.expert[w0 + r];
      if (e > last && e < next) {
        next = e;
        at = r;
      }
    }
    acc = moe::CombineStep(acc, routes.out[w0 + at][j], routes.weight[w0 + at]);
    last = next;
  }
  out[static_cast<int64_t>(blockIdx.y) * n + col] = FromFloat<T>(acc);
}

// A warp's dot of its C (per-lane partial) sums: butterfly, scale, rounding to T.
template <typename Format, typename T, int C>
__device__ __forceinline__ void FinishRoute(float (&dot)[C][1], const float (&scale)[C], int warp, int lane,
                                            DownRoutes<C>& routes) {
#pragma unroll
  for (int j = 0; j < C; ++j) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) dot[j][0] += __shfl_xor_sync(0xffffffffu, dot[j][0], offset);
    const float d = Format::kScaled ? dot[j][0] * scale[j] : dot[j][0];
    if (lane == 0) routes.out[warp][j] = ToFloat(FromFloat<T>(d));
  }
}

struct DownArgs {
  const int32_t* chosen;
  const float* route_weights;
  const float* scales;
  int top_k, groups, k, n;
};

// The warp's place: its route, its first column, its expert (and the route's expert and
// weight recorded for the combine), its columns' scales.
template <typename Format, int C>
struct DownWarp {
  int warp, lane, route, col0, expert;
  int64_t first;  // the row's first route
  float scale[C];

  __device__ __forceinline__ DownWarp(const DownArgs& a, DownRoutes<C>& routes) {
    warp = threadIdx.x >> 5;
    lane = threadIdx.x & 31;
    const int group = warp / a.top_k;
    route = warp - group * a.top_k;
    col0 = (blockIdx.x * a.groups + group) * C;
    first = static_cast<int64_t>(blockIdx.y) * a.top_k;
    expert = __ldcg(a.chosen + first + route);
    if (lane == 0) {
      routes.expert[warp] = expert;
      routes.weight[warp] = __ldcg(a.route_weights + first + route);
    }
#pragma unroll
    for (int j = 0; j < C; ++j) {
      scale[j] = 1.0f;
      if constexpr (Format::kScaled) {
        if (col0 + j < a.n) scale[j] = __ldg(a.scales + static_cast<int64_t>(expert) * a.n + col0 + j);
      }
    }
  }
  // Of the warp's C columns, how many exist (the last CTA's last group may hold fewer).
  __device__ __forceinline__ int Columns(int n) const { return max(0, min(C, n - col0)); }
};

// Short rows: the warp's C rows in chunks of P pieces per lane and row, pieces base + lane +
// 32 u; each lane adds its pieces of a row in ascending order, whatever the chunking.
template <typename Format, typename T, int C>
__global__ void __launch_bounds__(kMoeMaxTopK * 32)
    DownCombineChunkedKernel(const T* __restrict__ act, const typename Format::Element* __restrict__ down,
                             DownArgs a, T* __restrict__ out) {
  constexpr int P = kDownPieces / C;
  __shared__ DownRoutes<C> routes;
  const DownWarp<Format, C> w(a, routes);
  const int pieces = a.k / Format::kPerPiece;
  const int columns = w.Columns(a.n);
  const uint4* rows = reinterpret_cast<const uint4*>(down + (static_cast<int64_t>(w.expert) * a.n + w.col0) * a.k);
  auto load = [&](int base, uint4 (&v)[P][C]) {
#pragma unroll
    for (int u = 0; u < P; ++u) {
      const int i = base + w.lane + 32 * u;
#pragma unroll
      for (int j = 0; j < C; ++j) {
        if (i < pieces && j < columns) v[u][j] = __ldcs(rows + j * pieces + i);
      }
    }
  };
  uint4 v[P][C] = {};  // a column past n adds zeros, never combined
  load(0, v);
  PdlWait();
  PdlLaunchDependents();
  if (columns > 0) {
    const T* x = act + (w.first + w.route) * a.k;
    float dot[C][1] = {};
    for (int base = 0;;) {
#pragma unroll
      for (int u = 0; u < P; ++u) {
        const int i = base + w.lane + 32 * u;
        if (i < pieces) {
#pragma unroll
          for (int j = 0; j < C; ++j) Format::template Accumulate<1>(v[u][j], x, a.k, i, dot[j]);
        }
      }
      base += 32 * P;
      if (base >= pieces) break;
      load(base, v);
    }
    FinishRoute<Format, T, C>(dot, w.scale, w.warp, w.lane, routes);
  }
  __syncthreads();
  CombineColumns<T, C>(routes, a.top_k, a.groups, a.n, out);
}

// Long rows: one column per warp, streamed through registers as the per-route GEMV does.
template <typename Format, typename T>
__global__ void __launch_bounds__(kMoeMaxTopK * 32)
    DownCombineStreamKernel(const T* __restrict__ act, const typename Format::Element* __restrict__ down,
                            DownArgs a, T* __restrict__ out) {
  __shared__ DownRoutes<1> routes;
  const DownWarp<Format, 1> w(a, routes);
  const bool on = w.Columns(a.n) > 0;
  const int64_t c = on ? w.col0 : 0;
  const uint4* wrow[1] = {reinterpret_cast<const uint4*>(down + (static_cast<int64_t>(w.expert) * a.n + c) * a.k)};
  const int pieces = a.k / Format::kPerPiece;
  const int ahead = on ? min(kDownStreamPre, pieces / 32) : 0;  // whole 32-lane groups only
  uint4 pre[kDownStreamPre][1];
  gemv::LoadAhead<1, kDownStreamPre>(wrow, w.lane, ahead, pre);
  PdlWait();
  PdlLaunchDependents();
  if (on) {
    const T* x = act + (w.first + w.route) * a.k;
    float dot[1][1] = {};
    gemv::Stream<1, kDownStreamPre, gemv::kUnroll>(wrow, w.lane, ahead, pieces, pre,
                                                    [&](const uint4(&v)[1], int piece) {
                                                      Format::template Accumulate<1>(v[0], x, a.k, piece, dot[0]);
                                                    });
    FinishRoute<Format, T, 1>(dot, w.scale, w.warp, w.lane, routes);
  }
  __syncthreads();
  CombineColumns<T, 1>(routes, a.top_k, a.groups, a.n, out);
}

// Short rows on the copy engine: each warp's C rows are one contiguous stretch of its expert's
// weights, which one elected lane asks the copy engine for as soon as the routing is read (before
// the PDL wait), into shared memory: no register holds a weight in flight, so every CTA of the
// grid is resident at once and the whole layer's down weights are requested at its start. After
// the wait each lane loads its pieces of the route's activations, then dots them with the rows
// in shared memory: the same pieces in the same order per lane as DownCombineChunkedKernel, the
// same finish and combine, so the same bits.
// LP: a lane's pieces of a row, at most (its activations' registers).
template <typename Format, typename T, int C, int LP>
__global__ void __launch_bounds__(kDownWarps * 32, kDownBulkCtas)
    DownCombineBulkKernel(const T* __restrict__ act, const typename Format::Element* __restrict__ down,
                          DownArgs a, T* __restrict__ out) {
  extern __shared__ uint4 staged_rows[];  // warp w's C rows at w * C * pieces
  __shared__ DownRoutes<C> routes;
  __shared__ alignas(8) uint64_t landed[kMoeMaxTopK];
  const DownWarp<Format, C> w(a, routes);
  const int pieces = a.k / Format::kPerPiece;
  const int columns = w.Columns(a.n);
  const uint4* rows = staged_rows + w.warp * C * pieces;
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&landed[w.warp]));
  if (w.lane == 0 && columns > 0) {
    MbarInit(bar, 1);
    MbarInitFence();
    const uint32_t bytes = static_cast<uint32_t>(columns * pieces) * 16u;
    MbarExpectTx(bar, bytes);
    BulkLoad(static_cast<uint32_t>(__cvta_generic_to_shared(rows)),
             down + (static_cast<int64_t>(w.expert) * a.n + w.col0) * a.k, bytes, bar, EvictFirstPolicy());
  }
  __syncwarp();  // the barrier's init, before the other lanes wait on it
  PdlWait();
  PdlLaunchDependents();
  if (columns > 0) {
    const uint4* x = reinterpret_cast<const uint4*>(act + (w.first + w.route) * a.k);
    uint4 xv[LP][Format::kXPieces];
#pragma unroll
    for (int u = 0; u < LP; ++u) {
      const int i = w.lane + 32 * u;
#pragma unroll
      for (int q = 0; q < Format::kXPieces; ++q) {
        if (i < pieces) xv[u][q] = __ldg(x + i * Format::kXPieces + q);
      }
    }
    MbarWait(bar, 0);
    float dot[C][1] = {};
#pragma unroll
    for (int u = 0; u < LP; ++u) {
      const int i = w.lane + 32 * u;
      if (i < pieces) {
#pragma unroll
        for (int j = 0; j < C; ++j) {
          if (j < columns) {
            float wf[Format::kPerPiece];
            Format::Unpack(rows[j * pieces + i], wf);
            Format::Fma(wf, xv[u], dot[j][0]);
          }
        }
      }
    }
    FinishRoute<Format, T, C>(dot, w.scale, w.warp, w.lane, routes);
  }
  __syncthreads();
  CombineColumns<T, C>(routes, a.top_k, a.groups, a.n, out);
}

// Groups of top_k warps per CTA: as many as fit in kDownWarps (one past top_k 8).
int DownGroups(int top_k) { return top_k <= kDownWarps ? kDownWarps / top_k : 1; }

template <typename Format, typename T, int C>
cudaError_t LaunchChunked(const MoeDownCombineParams<T>& p, const DownArgs& a, cudaStream_t stream,
                          const CudaLaunchOptions& launch) {
  const int cols = a.groups * C;
  const dim3 grid((p.n + cols - 1) / cols, static_cast<unsigned>(p.rows));
  return LaunchPdl(launch, DownCombineChunkedKernel<Format, T, C>, grid, dim3(a.groups * p.top_k * 32), 0, stream,
                   p.act, static_cast<const typename Format::Element*>(p.down), a, p.out);
}

// C columns of every route a CTA, their rows in column_bytes * C of dynamic shared memory.
template <typename Format, typename T, int C, int LP>
cudaError_t LaunchBulk(const MoeDownCombineParams<T>& p, const DownArgs& a, int64_t column_bytes, cudaStream_t stream,
                       const CudaLaunchOptions& launch) {
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      DownCombineBulkKernel<Format, T, C, LP>, cudaFuncAttributeMaxDynamicSharedMemorySize, kDownBulkBytes);
  if (opted_in != cudaSuccess) return opted_in;
  const int cols = a.groups * C;
  const dim3 grid((p.n + cols - 1) / cols, static_cast<unsigned>(p.rows));
  return LaunchPdl(launch, DownCombineBulkKernel<Format, T, C, LP>, grid, dim3(a.groups * p.top_k * 32),
                   static_cast<size_t>(column_bytes * C), stream, p.act,
                   static_cast<const typename Format::Element*>(p.down), a, p.out);
}

template <typename Format, typename T, int C>
cudaError_t LaunchBulk(const MoeDownCombineParams<T>& p, const DownArgs& a, int64_t column_bytes, int lane_pieces,
                       cudaStream_t stream, const CudaLaunchOptions& launch) {
  if constexpr (C > 2) {
    if (lane_pieces <= 2) return LaunchBulk<Format, T, C, 2>(p, a, column_bytes, stream, launch);
  }
  return LaunchBulk<Format, T, C, kDownBulkLanePieces>(p, a, column_bytes, stream, launch);
}

// The bulk path where asked and the CTA's rows fit (the widest C that does); else C by a lane's
// pieces of one row: kDownPieces in flight for rows of up to 8 pieces a lane,
// the stream beyond.
template <typename Format, typename T>
cudaError_t LaunchDownCombine(const MoeDownCombineParams<T>& p, cudaStream_t stream,
                              const CudaLaunchOptions& launch) {
  const DownArgs a{p.chosen, p.weights, p.scales, p.top_k, DownGroups(p.top_k), p.k, p.n};
  const int lane_pieces = (p.k / Format::kPerPiece + 31) / 32;
  const int64_t column_bytes = static_cast<int64_t>(a.groups) * p.top_k * p.k * sizeof(typename Format::Element);
  const bool bulk = p.bulk && p.top_k <= kDownWarps && lane_pieces <= kDownBulkLanePieces;
  cudaError_t err;
  if (bulk && 8 * column_bytes <= kDownBulkBytes) {
    err = LaunchBulk<Format, T, 8>(p, a, column_bytes, lane_pieces, stream, launch);
  } else if (bulk && 4 * column_bytes <= kDownBulkBytes) {
    err = LaunchBulk<Format, T, 4>(p, a, column_bytes, lane_pieces, stream, launch);
  } else if (bulk && 2 * column_bytes <= kDownBulkBytes) {
    err = LaunchBulk<Format, T, 2>(p, a, column_bytes, lane_pieces, stream, launch);
  } else if (lane_pieces <= kDownPieces / 8) {
    err = LaunchChunked<Format, T, 8>(p, a, stream, launch);
  } else if (lane_pieces <= kDownPieces / 4) {
    err = LaunchChunked<Format, T, 4>(p, a, stream, launch);
  } else if (lane_pieces <= kDownPieces / 2) {
    err = LaunchChunked<Format, T, 2>(p, a, stream, launch);
  } else {
    const dim3 grid((p.n + a.groups - 1) / a.groups, static_cast<unsigned>(p.rows));
    err = LaunchPdl(launch, DownCombineStreamKernel<Format, T>, grid, dim3(a.groups * p.top_k * 32), 0, stream, p.act,
                    static_cast<const typename Format::Element*>(p.down), a, p.out);
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t MoeDecodeDownCombine(const MoeDownCombineParams<T>& p, cudaStream_t stream,
                                 const CudaLaunchOptions& launch) {
  const int k_multiple = p.fp8 ? 16 : 8;
  if (p.act == nullptr || p.chosen == nullptr || p.weights == nullptr || p.down == nullptr || p.out == nullptr ||
      (p.fp8 && p.scales == nullptr) || p.rows < 1 || p.rows > 65535 || p.top_k < 1 || p.top_k > kMoeMaxTopK ||
      p.k < k_multiple || p.k % k_multiple != 0 || p.n < 1 || reinterpret_cast<uintptr_t>(p.act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.down) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  return p.fp8 ? LaunchDownCombine<gemv::WeightsFp8<T>>(p, stream, launch)
               : LaunchDownCombine<gemv::Weights16<T>>(p, stream, launch);
}

#define KVTIER_INSTANTIATE(T)                                                                            \
  template cudaError_t MoeDecodeDownCombine<T>(const MoeDownCombineParams<T>&, cudaStream_t, const CudaLaunchOptions&);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
