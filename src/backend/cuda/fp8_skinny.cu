// W8A16 tensor-core projection for 3..64-row decode batches (fp8_skinny.h).
//
// Fragment layout: mma.m16n8k16 gives thread (g = lane / 4, t = lane % 4) the A elements
// (row g and g + 8, k 2t, 2t + 1, 2t + 8, 2t + 9) and the B elements (k the same, column g).
// A dot product does not care about the order of k, so each thread's four logical k of
// k-step s are mapped to the four consecutive physical columns 16t + 4s .. 16t + 4s + 3 of
// the 64-column chunk: one 16-byte load of codes per weight row covers all four k-steps, and
// the activations the thread needs are the same 16 consecutive elements of its row (two
// 16-byte loads). Weight rows sit at 64 bytes (conflict-free 16-byte reads per quarter warp),
// activation rows at 144 bytes (128 + 16 of padding, likewise).
#include "backend/cuda/fp8_skinny.h"

#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

// Each warp holds kMTiles m-tiles (16 weight rows each) and reuses every activation
// fragment it reads from shared memory for all of them: the activation reads, not the
// weights, are the shared-memory traffic (64 rows x 16 k per k-step against 16 weight rows).
constexpr int kMTiles = 2;
constexpr int kWarps = 8 / kMTiles;
constexpr int kTileRows = kWarps * kMTiles * 16;  // weight rows per CTA
constexpr int kChunk = 64;              // columns per pipeline stage
constexpr int kStages = 4;
constexpr int kWStageBytes = kTileRows * kChunk;
constexpr int kXRowBytes = kChunk * 2 + 16;
constexpr int kFinishThreads = 256;

template <int NT>
constexpr int StageBytes() { return kWStageBytes + NT * 8 * kXRowBytes; }

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Two codes (low 16 bits) as a packed pair of T (exact).
template <typename T>
__device__ __forceinline__ uint32_t CodePair(uint32_t codes) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  if constexpr (std::is_same_v<T, f16>) {
    return static_cast<uint32_t>(raw.x) | (static_cast<uint32_t>(raw.y) << 16);
  } else {
    const float2 f = __half22float2(__half2(raw));
    return PackFloat2<T>(f.x, f.y);
  }
}

// partial[split, r, n] for this CTA's 128 weight rows and K range; NT * 8 >= rows.
template <typename T, int NT>
__global__ void __launch_bounds__(kWarps * 32, 16 / kWarps)  // <= 128 registers
    SkinnyFp8Kernel(const T* __restrict__ x, int rows, const uint8_t* __restrict__ codes, int k, int n,
                    int chunks_per_split, float* __restrict__ partial) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kStage = StageBytes<NT>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * kTileRows;
  const int chunks = k / kChunk;
  const int c_begin = blockIdx.y * chunks_per_split;
  const int my_chunks = min(chunks, c_begin + chunks_per_split) - c_begin;

  auto load_w = [&](int stage, int c) {
    uint8_t* dst = smem + stage * kStage;
    for (int p = threadIdx.x; p < kTileRows * 4; p += kWarps * 32) {
      const int r = p >> 2, piece = p & 3;
      const int64_t wr = min(row0 + r, n - 1);
      CpAsync16(dst + r * kChunk + piece * 16, codes + wr * k + static_cast<int64_t>(c) * kChunk + piece * 16);
    }
  };
  auto load_x = [&](int stage, int c) {
    uint8_t* dst = smem + stage * kStage + kWStageBytes;
    for (int p = threadIdx.x; p < NT * 8 * 8; p += kWarps * 32) {
      const int r = p >> 3, piece = p & 7;
      const int64_t xr = min(r, rows - 1);  // padding rows: any valid row, never written out
      CpAsync16(dst + r * kXRowBytes + piece * 16,
                reinterpret_cast<const uint8_t*>(x + xr * k + static_cast<int64_t>(c) * kChunk) + piece * 16);
    }
  };

  // The weights do not depend on the previous kernel: their first stages go out before the
  // wait (they join group 0 below); the activations only after it.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_chunks) load_w(s, c_begin + s);
  }
  PdlWait();
  PdlLaunchDependents();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_chunks) load_x(s, c_begin + s);
    CpAsyncCommit();
  }

  float acc[kMTiles][NT][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][j][i] = 0.0f;
    }
  }
  for (int i = 0; i < my_chunks; ++i) {
    CpAsyncWait<kStages - 2>();  // stage i has landed (for this thread's copies) ...
    __syncthreads();             // ... and for everyone's; stage i - 1 is free again
    const int next = i + kStages - 1;
    if (next < my_chunks) {
      load_w(next % kStages, c_begin + next);
      load_x(next % kStages, c_begin + next);
    }
    CpAsyncCommit();
    const uint8_t* st = smem + (i % kStages) * kStage;
    uint32_t gw[kMTiles][4], ew[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const int base_row = (warp * kMTiles + mt) * 16 + g;
      const uint4 wg = *reinterpret_cast<const uint4*>(st + base_row * kChunk + t * 16);
      const uint4 w8 = *reinterpret_cast<const uint4*>(st + (base_row + 8) * kChunk + t * 16);
      gw[mt][0] = wg.x, gw[mt][1] = wg.y, gw[mt][2] = wg.z, gw[mt][3] = wg.w;
      ew[mt][0] = w8.x, ew[mt][1] = w8.y, ew[mt][2] = w8.z, ew[mt][3] = w8.w;
    }
    // Activations half a chunk at a time (fewer live registers).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 xv[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        xv[j] = *reinterpret_cast<const uint4*>(st + kWStageBytes + (j * 8 + g) * kXRowBytes + t * 32 + h * 16);
      }
#pragma unroll
      for (int s = 2 * h; s < 2 * h + 2; ++s) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          const uint32_t a[4] = {CodePair<T>(gw[mt][s]), CodePair<T>(ew[mt][s]), CodePair<T>(gw[mt][s] >> 16),
                                 CodePair<T>(ew[mt][s] >> 16)};
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const uint32_t b[2] = {(s & 1) ? xv[j].z : xv[j].x, (s & 1) ? xv[j].w : xv[j].y};
            MmaM16N8K16<T>(acc[mt][j], a, b);
          }
        }
      }
    }
  }
  CpAsyncWait<0>();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int wrow = row0 + (warp * kMTiles + mt) * 16 + g + (i >= 2 ? 8 : 0);
        const int act = j * 8 + 2 * t + (i & 1);
        if (wrow < n && act < rows) {
          partial[(static_cast<int64_t>(blockIdx.y) * rows + act) * n + wrow] = acc[mt][j][i];
        }
      }
    }
  }
}

// out[r, c] = T(scales[c] * sum over splits in order), or A(gate) * up (kGated).
template <typename T, bool kGated, GateActivation A>
__global__ void __launch_bounds__(kFinishThreads)
    SkinnyFinishKernel(const float* __restrict__ partial, int splits, int rows, int n, const float* __restrict__ scales,
                       T* __restrict__ out) {
  PdlWait();
  PdlLaunchDependents();
  const int n_out = kGated ? n / 2 : n;
  const int64_t total = static_cast<int64_t>(rows) * n_out;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(idx / n_out), c = static_cast<int>(idx % n_out);
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += partial[(static_cast<int64_t>(s) * rows + r) * n + c];
    v *= scales[c];
    if constexpr (kGated) {
      float u = 0.0f;
      for (int s = 0; s < splits; ++s) u += partial[(static_cast<int64_t>(s) * rows + r) * n + n_out + c];
      u *= scales[n_out + c];
      v = GateTimes<A>(v, u);
    }
    out[idx] = FromFloat<T>(v);
  }
}

template <typename T, int NT>
cudaError_t LaunchSkinny(const T* x, int rows, const uint8_t* codes, int k, int n, int chunks_per_split,
                         int splits, float* partial, cudaStream_t stream, const CudaLaunchOptions& launch) {
  constexpr int smem = kStages * StageBytes<NT>();
  const dim3 grid((n + kTileRows - 1) / kTileRows, splits);
  return LaunchPdl(launch, SkinnyFp8Kernel<T, NT>, grid, dim3(kWarps * 32), smem, stream, x, rows, codes, k, n,
                   chunks_per_split, partial);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int NT>
cudaError_t OptIn() {
  return cudaFuncSetAttribute(SkinnyFp8Kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              kStages * StageBytes<NT>());
}

}  // namespace

cudaError_t SkinnyFp8Init() {
  for (cudaError_t err : {OptIn<bf16, 1>(), OptIn<bf16, 2>(), OptIn<bf16, 4>(), OptIn<bf16, 8>(), OptIn<f16, 1>(),
                          OptIn<f16, 2>(), OptIn<f16, 4>(), OptIn<f16, 8>()}) {
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

bool SkinnyFp8Supported(int rows, int64_t in_features, const void* x, const void* codes) {
  return rows >= 1 && rows <= kSkinnyFp8MaxRows && in_features > 0 && in_features % kChunk == 0 &&
         in_features <= INT32_MAX && Aligned16(x) && Aligned16(codes);
}

int SkinnyFp8Splits(int64_t out_features, int64_t in_features, int sm_count) {
  const int64_t tiles = (out_features + kTileRows - 1) / kTileRows;
  const int64_t chunks = std::max<int64_t>(1, in_features / kChunk);
  // About two CTAs per SM, each split at least 4 chunks long, at most 16 splits.
  int64_t splits = (2 * std::max(sm_count, 1) + tiles - 1) / tiles;
  splits = std::clamp<int64_t>(splits, 1, std::max<int64_t>(1, std::min<int64_t>(16, chunks / 4)));
  const int64_t per_split = (chunks + splits - 1) / splits;
  return static_cast<int>((chunks + per_split - 1) / per_split);  // none empty
}

size_t SkinnyFp8PartialFloats(int rows, int64_t out_features, int splits) {
  return static_cast<size_t>(splits) * static_cast<size_t>(rows) * static_cast<size_t>(out_features);
}

template <typename T>
cudaError_t SkinnyFp8(const T* x, int rows, const uint8_t* codes, const float* scales, int64_t out_features,
                      int64_t in_features, int splits, float* partial, std::optional<GateActivation> gate, T* out,
                      cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (!SkinnyFp8Supported(rows, in_features, x, codes) || out_features <= 0 || out_features > INT32_MAX ||
      splits < 1 || (gate && out_features % 2 != 0)) {
    return cudaErrorInvalidValue;
  }
  const int k = static_cast<int>(in_features), n = static_cast<int>(out_features);
  const int chunks = k / kChunk;
  const int per_split = (chunks + splits - 1) / splits;
  const int used = (chunks + per_split - 1) / per_split;
  cudaError_t err;
  if (rows <= 8) {
    err = LaunchSkinny<T, 1>(x, rows, codes, k, n, per_split, used, partial, stream, launch);
  } else if (rows <= 16) {
    err = LaunchSkinny<T, 2>(x, rows, codes, k, n, per_split, used, partial, stream, launch);
  } else if (rows <= 32) {
    err = LaunchSkinny<T, 4>(x, rows, codes, k, n, per_split, used, partial, stream, launch);
  } else {
    err = LaunchSkinny<T, 8>(x, rows, codes, k, n, per_split, used, partial, stream, launch);
  }
  if (err != cudaSuccess) return err;
  const int64_t outputs = static_cast<int64_t>(rows) * (gate ? n / 2 : n);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((outputs + kFinishThreads - 1) / kFinishThreads, 4096)));
  auto finish = SkinnyFinishKernel<T, false, GateActivation::kSilu>;
  if (gate == GateActivation::kSilu) finish = SkinnyFinishKernel<T, true, GateActivation::kSilu>;
  if (gate == GateActivation::kGeluTanh) finish = SkinnyFinishKernel<T, true, GateActivation::kGeluTanh>;
  err = LaunchPdl(launch, finish, grid, dim3(kFinishThreads), 0, stream, static_cast<const float*>(partial), used,
                  rows, n, scales, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T)                                                                                  \
  template cudaError_t SkinnyFp8<T>(const T*, int, const uint8_t*, const float*, int64_t, int64_t, int, float*, \
                                    std::optional<GateActivation>, T*, cudaStream_t, const CudaLaunchOptions&);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
