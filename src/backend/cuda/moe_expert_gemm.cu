// The grouped expert GEMM of the mixture-of-experts MLP (moe_kernels.h MoeExpertGemm): one
// launch for all experts of a layer. The grid is (column tiles, tile slots); a CTA takes one
// tile of MoeGroupRoutes' list (an expert and up to BM of its routes; slots past the list's
// length exit before reading anything), gathers its activation rows, and streams that
// expert's weight rows for its BN output columns through shared memory into the tensor cores
// (WMMA 16x16x16, fp32 accumulation). fp8 weights are the same kernel (kFp8): their codes are
// converted to the compute dtype as they are stored to shared memory, and each column's scale
// is applied once at the end, as the dense fp8 kernels do.
//
// Pipeline: the next K chunk's global loads go out into registers before the tensor cores
// consume the current chunk from shared memory, which is double-buffered, so one barrier per
// chunk suffices. Four warps; where a tile has fewer 16x16 output blocks than warps (the
// decode tile 16x16), the warps split K and add their partial sums at the end.
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/gate_activation.h"
#include "backend/cuda/moe_expert_gemv.h"
#include "backend/cuda/moe_kernels.h"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kPad = 8;  // elements after each shared row: keeps WMMA's 32-byte alignment, spreads banks

template <int BM, int BN, int BK>
struct TileShape {
  static constexpr int kWarpsM = BM / 16 < kWarps ? BM / 16 : kWarps;
  static constexpr int kWarpsN = BN / 16 < kWarps / kWarpsM ? BN / 16 : kWarps / kWarpsM;
  static constexpr int kWarpsK = kWarps / (kWarpsM * kWarpsN);  // warps splitting each chunk's K
  static constexpr int kFragsM = BM / 16 / kWarpsM;
  static constexpr int kFragsN = BN / 16 / kWarpsN;
  static constexpr int kLd = BK + kPad;  // shared row stride (elements)
  static_assert(kWarpsM * kWarpsN * kWarpsK == kWarps && BK % (16 * kWarpsK) == 0, "tile shape");
};

// Dynamic shared memory of one CTA: two A buffers (BM, kLd), two B buffers (rows, kLd), the
// output tile(s) in fp32 (BM, BN), and the K-split partials where warps split K.
template <typename T, int BM, int BN, int BK, bool kGated>
constexpr size_t SharedBytes() {
  using S = TileShape<BM, BN, BK>;
  constexpr int kBRows = kGated ? 2 * BN : BN;
  constexpr int kOutputs = kGated ? 2 : 1;
  constexpr size_t kSplitFloats = S::kWarpsK > 1 ? kOutputs * kWarps * S::kFragsM * S::kFragsN * 256 : 0;
  return sizeof(T) * 2 * (BM + kBRows) * S::kLd + sizeof(float) * (kOutputs * BM * BN + kSplitFloats);
}

template <typename T, bool kFp8, int BM, int BN, int BK, bool kGated>
__global__ void __launch_bounds__(kThreads) ExpertGemmKernel(MoeGemmParams<T> p, MoeGrouping g) {
  using namespace nvcuda;
  using S = TileShape<BM, BN, BK>;
  constexpr int kBRows = kGated ? 2 * BN : BN;
  constexpr int kOutputs = kGated ? 2 : 1;
  constexpr int kPerPiece = kFp8 ? 16 : 8;  // weight elements per 16-byte load
  constexpr int kAPieces = BM * BK / 8 / kThreads;
  constexpr int kBPieces = kBRows * BK / kPerPiece / kThreads;
  static_assert(kAPieces >= 1 && kBPieces >= 1 && BM * BK / 8 % kThreads == 0 &&
                    kBRows * BK / kPerPiece % kThreads == 0,
                "whole loads per thread");

  if (static_cast<int>(blockIdx.y) >= *g.num_tiles) return;
  const int2 tile = g.tiles[blockIdx.y];
  const int expert = tile.x, m0 = tile.y;
  const int first_slot = g.expert_offsets[expert] + m0;
  const int tile_rows = min(BM, g.expert_offsets[expert + 1] - first_slot);
  const int n0 = blockIdx.x * BN;
  const int k = p.k, n = p.n;
  const int64_t matrix_rows = kGated ? 2 * static_cast<int64_t>(n) : n;

  extern __shared__ __align__(128) unsigned char smem[];
  T* a_smem = reinterpret_cast<T*>(smem);                   // [2][BM][kLd]
  T* b_smem = a_smem + 2 * BM * S::kLd;                     // [2][kBRows][kLd]
  float* c_smem = reinterpret_cast<float*>(b_smem + 2 * kBRows * S::kLd);  // [kOutputs][BM][BN]
  float* split_smem = c_smem + kOutputs * BM * BN;          // [kOutputs][warps][frags][256]

  // This thread's pieces: A piece q covers row q / (BK / 8), columns 8 * (q % (BK / 8)); B likewise.
  const T* a_row[kAPieces];
  int a_col[kAPieces];
#pragma unroll
  for (int i = 0; i < kAPieces; ++i) {
    const int q = threadIdx.x + i * kThreads;
    const int r = q / (BK / 8);
    a_col[i] = 8 * (q % (BK / 8));
    a_row[i] = nullptr;
    if (r < tile_rows) {
      const int slot = first_slot + r;
      const int row = p.a_row_of_slot != nullptr ? p.a_row_of_slot[slot] : slot;
      a_row[i] = p.a + static_cast<int64_t>(row) * k;
    }
  }
  using WElem = typename std::conditional<kFp8, uint8_t, T>::type;
  const WElem* b_row[kBPieces];
  int b_col[kBPieces];
#pragma unroll
  for (int i = 0; i < kBPieces; ++i) {
    const int q = threadIdx.x + i * kThreads;
    const int r = q / (BK / kPerPiece);
    b_col[i] = kPerPiece * (q % (BK / kPerPiece));
    const int col = n0 + (kGated && r >= BN ? r - BN : r);
    b_row[i] = nullptr;
    if (col < n) {
      const int64_t w_row = static_cast<int64_t>(expert) * matrix_rows + (kGated && r >= BN ? n + col : col);
      b_row[i] = static_cast<const WElem*>(p.weights) + w_row * k;
    }
  }

  uint4 a_regs[kAPieces], b_regs[kBPieces];
  auto load = [&](int chunk) {
    const int k0 = chunk * BK;
#pragma unroll
    for (int i = 0; i < kAPieces; ++i) {
      const int kk = k0 + a_col[i];
      a_regs[i] = a_row[i] != nullptr && kk < k ? __ldg(reinterpret_cast<const uint4*>(a_row[i] + kk))
                                                : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kBPieces; ++i) {
      const int kk = k0 + b_col[i];
      b_regs[i] = b_row[i] != nullptr && kk < k ? __ldcs(reinterpret_cast<const uint4*>(b_row[i] + kk))
                                                : make_uint4(0, 0, 0, 0);
    }
  };
  auto store = [&](int buf) {
    T* a_buf = a_smem + buf * BM * S::kLd;
    T* b_buf = b_smem + buf * kBRows * S::kLd;
#pragma unroll
    for (int i = 0; i < kAPieces; ++i) {
      const int q = threadIdx.x + i * kThreads;
      *reinterpret_cast<uint4*>(a_buf + (q / (BK / 8)) * S::kLd + a_col[i]) = a_regs[i];
    }
#pragma unroll
    for (int i = 0; i < kBPieces; ++i) {
      const int q = threadIdx.x + i * kThreads;
      T* dst = b_buf + (q / (BK / kPerPiece)) * S::kLd + b_col[i];
      if constexpr (kFp8) {
        float f[16];
        Fp8x16ToFloat(b_regs[i], f);
        float lo[8], hi[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          lo[e] = f[e];
          hi[e] = f[8 + e];
        }
        reinterpret_cast<uint4*>(dst)[0] = Pack8<T>(lo);
        reinterpret_cast<uint4*>(dst)[1] = Pack8<T>(hi);
      } else {
        *reinterpret_cast<uint4*>(dst) = b_regs[i];
      }
    }
  };

  const int warp = threadIdx.x >> 5;
  const int wm = warp % S::kWarpsM, wn = (warp / S::kWarpsM) % S::kWarpsN, wk = warp / (S::kWarpsM * S::kWarpsN);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kOutputs][S::kFragsM][S::kFragsN];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
    for (int fm = 0; fm < S::kFragsM; ++fm) {
#pragma unroll
      for (int fn = 0; fn < S::kFragsN; ++fn) wmma::fill_fragment(acc[o][fm][fn], 0.0f);
    }
  }
  auto mma = [&](int buf) {
    const T* a_buf = a_smem + buf * BM * S::kLd;
    const T* b_buf = b_smem + buf * kBRows * S::kLd;
#pragma unroll
    for (int ks = wk; ks < BK / 16; ks += S::kWarpsK) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a_frag[S::kFragsM];
#pragma unroll
      for (int fm = 0; fm < S::kFragsM; ++fm) {
        wmma::load_matrix_sync(a_frag[fm], a_buf + ((wm * S::kFragsM + fm) * 16) * S::kLd + ks * 16, S::kLd);
      }
#pragma unroll
      for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
        for (int fn = 0; fn < S::kFragsN; ++fn) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b_frag;
          const int b_row0 = o * BN + (wn * S::kFragsN + fn) * 16;
          wmma::load_matrix_sync(b_frag, b_buf + b_row0 * S::kLd + ks * 16, S::kLd);
#pragma unroll
          for (int fm = 0; fm < S::kFragsM; ++fm) wmma::mma_sync(acc[o][fm][fn], a_frag[fm], b_frag, acc[o][fm][fn]);
        }
      }
    }
  };

  const int chunks = (k + BK - 1) / BK;
  load(0);
  store(0);
  __syncthreads();
  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (chunk + 1 < chunks) load(chunk + 1);
    mma(chunk & 1);
    if (chunk + 1 < chunks) store((chunk + 1) & 1);
    __syncthreads();
  }

  // K-split warps (wk > 0) hand their partial sums to wk == 0 through shared memory; fragments
  // of one type share their element layout, so the sums are element by element.
  constexpr int kFrags = S::kFragsM * S::kFragsN;
  if constexpr (S::kWarpsK > 1) {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        float* part = split_smem + ((o * kWarps + warp) * kFrags + f) * 256;
        const auto& frag = acc[o][f / S::kFragsN][f % S::kFragsN];
        for (int e = 0; e < frag.num_elements; ++e) part[e * 32 + (threadIdx.x & 31)] = frag.x[e];
      }
    }
    __syncthreads();
    if (wk == 0) {
      for (int other = 1; other < S::kWarpsK; ++other) {
        const int other_warp = warp + other * S::kWarpsM * S::kWarpsN;
#pragma unroll
        for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
          for (int f = 0; f < kFrags; ++f) {
            const float* part = split_smem + ((o * kWarps + other_warp) * kFrags + f) * 256;
            auto& frag = acc[o][f / S::kFragsN][f % S::kFragsN];
            for (int e = 0; e < frag.num_elements; ++e) frag.x[e] += part[e * 32 + (threadIdx.x & 31)];
          }
        }
      }
    }
  }
  if (wk == 0) {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
      for (int fm = 0; fm < S::kFragsM; ++fm) {
#pragma unroll
        for (int fn = 0; fn < S::kFragsN; ++fn) {
          float* dst = c_smem + o * BM * BN + ((wm * S::kFragsM + fm) * 16) * BN + (wn * S::kFragsN + fn) * 16;
          wmma::store_matrix_sync(dst, acc[o][fm][fn], BN, wmma::mem_row_major);
        }
      }
    }
  }
  __syncthreads();

  // Epilogue: scales (fp8), the gate activation, the compute dtype; rows past the tile's
  // routes and columns past n are not written.
  for (int i = threadIdx.x; i < BM * BN; i += kThreads) {
    const int r = i / BN, c = i % BN;
    const int col = n0 + c;
    if (r >= tile_rows || col >= n) continue;
    float v = c_smem[i];
    if constexpr (kFp8) v *= __ldg(p.scales + static_cast<int64_t>(expert) * matrix_rows + col);
    if constexpr (kGated) {
      float up = c_smem[BM * BN + i];
      if constexpr (kFp8) up *= __ldg(p.scales + static_cast<int64_t>(expert) * matrix_rows + n + col);
      v = GateTimes<GateActivation::kSilu>(v, up);
    }
    p.out[static_cast<int64_t>(first_slot + r) * n + col] = FromFloat<T>(v);
  }
}

// The kernel's shared memory above the 48 KiB default, set once per instance (thread-safe
// static), before any launch when MoeExpertGemmInit ran: not while a graph is captured.
template <typename T, bool kFp8, int BM, int BN, int BK, bool kGated>
cudaError_t AllowSharedMemory() {
  static const cudaError_t err =
      cudaFuncSetAttribute(ExpertGemmKernel<T, kFp8, BM, BN, BK, kGated>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(SharedBytes<T, BM, BN, BK, kGated>()));
  return err;
}

template <typename T, bool kFp8, int BM, int BN, int BK, bool kGated>
cudaError_t LaunchExpertGemm(const MoeGemmParams<T>& p, cudaStream_t stream) {
  constexpr size_t smem = SharedBytes<T, BM, BN, BK, kGated>();
  auto* kernel = ExpertGemmKernel<T, kFp8, BM, BN, BK, kGated>;
  const cudaError_t err = AllowSharedMemory<T, kFp8, BM, BN, BK, kGated>();
  if (err != cudaSuccess) return err;
  const int64_t slots = MoeMaxTiles(p.routes, p.num_experts, BM);
  if (slots > 65535) return cudaErrorInvalidValue;
  const dim3 grid((p.n + BN - 1) / BN, static_cast<unsigned>(slots));
  kernel<<<grid, kThreads, smem, stream>>>(p, *p.grouping);
  return cudaGetLastError();
}

template <typename T, bool kFp8, bool kGated>
cudaError_t AllowSharedMemoryForTiles() {
  for (const cudaError_t err :
       {AllowSharedMemory<T, kFp8, 16, 16, 128, kGated>(), AllowSharedMemory<T, kFp8, 16, 16, 256, kGated>(),
        AllowSharedMemory<T, kFp8, 16, 64, 64, kGated>(), AllowSharedMemory<T, kFp8, 64, 64, 64, kGated>()}) {
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <typename T, bool kFp8, bool kGated>
cudaError_t LaunchForTile(const MoeGemmParams<T>& p, MoeTile tile, cudaStream_t stream) {
  switch (tile) {
    case MoeTile::k16x16: return LaunchExpertGemm<T, kFp8, 16, 16, 128, kGated>(p, stream);
    case MoeTile::k16x16Deep: return LaunchExpertGemm<T, kFp8, 16, 16, 256, kGated>(p, stream);
    case MoeTile::k16x64: return LaunchExpertGemm<T, kFp8, 16, 64, 64, kGated>(p, stream);
    default: return LaunchExpertGemm<T, kFp8, 64, 64, 64, kGated>(p, stream);
  }
}

}  // namespace

MoeTile MoeTileFor(MoeTile tile, int64_t routes, int64_t num_experts) {
  if (tile != MoeTile::kAuto && tile != MoeTile::kLibrary && tile != MoeTile::kSkinny) return tile;
  // Routes per chosen expert: decode steps give each expert a row or two, so a tile's rows are
  // padding and the weight stream is all; narrow column tiles spread it over more CTAs.
  const int64_t per_expert = num_experts > 0 ? routes / num_experts : routes;
  if (routes <= std::min<int64_t>(16, num_experts)) return MoeTile::kGemv;  // a row or two: an expert per route
  if (per_expert >= 32) return MoeTile::k64x64;
  // Below that the 16x16 tile was the fastest or tied on both shapes kvtier_cuda_moe_bench
  // sweeps (Qwen3-30B-A3B and Mixtral at 64 rows, 16-bit and fp8 experts): the weight stream
  // spread over the most CTAs beats the wider tiles' reuse of the few rows each expert gets.
  return MoeTile::k16x16;
}

int MoeTileRows(MoeTile tile) { return tile == MoeTile::k64x64 ? 64 : 16; }

const char* MoeTileName(MoeTile tile) {
  switch (tile) {
    case MoeTile::kGemv: return "gemv";
    case MoeTile::kGemvFused: return "gemv-fused";
    case MoeTile::k16x16: return "16x16";
    case MoeTile::k16x16Deep: return "16x16/k256";
    case MoeTile::k16x64: return "16x64";
    case MoeTile::k64x64: return "64x64";
    case MoeTile::kLibrary: return "cublas";
    case MoeTile::kSkinny: return "skinny";
    default: return "auto";
  }
}

int64_t MoeMaxTiles(int64_t routes, int64_t num_experts, int tile_rows) {
  return routes / tile_rows + (routes < num_experts ? routes : num_experts);
}

cudaError_t MoeExpertGemmInit() {
  for (const cudaError_t err :
       {AllowSharedMemoryForTiles<bf16, false, false>(), AllowSharedMemoryForTiles<bf16, false, true>(),
        AllowSharedMemoryForTiles<bf16, true, false>(), AllowSharedMemoryForTiles<bf16, true, true>(),
        AllowSharedMemoryForTiles<f16, false, false>(), AllowSharedMemoryForTiles<f16, false, true>(),
        AllowSharedMemoryForTiles<f16, true, false>(), AllowSharedMemoryForTiles<f16, true, true>()}) {
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <typename T>
bool MoeGemmOperandsValid(const MoeGemmParams<T>& p) {
  const int k_multiple = p.fp8 ? 16 : 8;
  return p.a != nullptr && p.weights != nullptr && p.out != nullptr && (!p.fp8 || p.scales != nullptr) &&
         p.k >= k_multiple && p.k % k_multiple == 0 && p.n >= 1 && p.routes >= 1 && p.num_experts >= 1 &&
         reinterpret_cast<uintptr_t>(p.a) % 16 == 0 && reinterpret_cast<uintptr_t>(p.weights) % 16 == 0;
}

template <typename T>
cudaError_t MoeExpertGemm(const MoeGemmParams<T>& p, cudaStream_t stream) {
  if (p.grouping == nullptr || !MoeGemmOperandsValid(p)) return cudaErrorInvalidValue;
  const MoeTile tile = MoeTileFor(p.tile, p.routes, p.num_experts);
  if (tile == MoeTile::kGemv || tile == MoeTile::kGemvFused) return MoeExpertGemv(p, stream);
  if (p.fp8) {
    return p.gated ? LaunchForTile<T, true, true>(p, tile, stream) : LaunchForTile<T, true, false>(p, tile, stream);
  }
  return p.gated ? LaunchForTile<T, false, true>(p, tile, stream) : LaunchForTile<T, false, false>(p, tile, stream);
}

#define KVTIER_INSTANTIATE(T)                                                   \
  template bool MoeGemmOperandsValid<T>(const MoeGemmParams<T>&);               \
  template cudaError_t MoeExpertGemm<T>(const MoeGemmParams<T>&, cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
