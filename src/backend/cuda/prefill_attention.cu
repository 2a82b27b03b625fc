// Tensor-core prefill attention (semantics in prefill_attention.h), FlashAttention-2 style.
//
// One CTA = one PrefillTile x one kv head: 4 warps x 16 query rows = kPrefillTileRows rows,
// row r = (token r / group, query head r % group of the kv head's group). Each warp keeps its
// 16 rows' Q fragments, S (16 x 64) and O (16 x head_dim) accumulators in registers. K and V
// tiles of 64 positions are gathered from the paged pool with cp.async into shared memory,
// double-buffered (tile j+1 loads while tile j computes), rows XOR-swizzled in 16-byte
// chunks so that ldmatrix reads 8 rows without bank conflicts. Q·K^T and P·V run on
// mma.sync m16n8k16 (bf16 or fp16 in) with fp32 accumulation; the softmax is online in the log2 domain
// (log2 e folded into the scale); only the KV tiles crossing the tile's first position are
// masked, and tiles past the last position are never visited. A sliding window (and Gemma 2's
// soft-cap, AttentionScores) masks per row too, and tiles before the window are not visited.
//
// kv_dtype fp8 (PagedKv::fp8): each thread loads its chunk's 8 codes and the row's scale with
// plain loads, dequantizes them in registers (kv_fp8.cuh) and stores the 16 bytes to the same
// swizzled place (cp.async cannot convert); the rest of the kernel is unchanged.
//
// Why 64 rows and 4 warps: on the short prefills that matter for TTFT (512 tokens of
// Llama-3-8B = 256 CTAs of 64 rows) 128-row CTAs would leave the 132 SMs half idle and
// lengthen the causal tail; 64 rows keep K/V reuse at 64x and leave registers for
// 2-3 CTAs per SM, which hide the cp.async latency the simple 2-stage pipeline exposes.
#include "backend/cuda/prefill_attention.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/online_softmax.cuh"
#include "backend/cuda/prefill_attention_wgmma.h"

namespace kvtier::cuda {
namespace {

constexpr int kWarps = kPrefillTileRows / 16;
constexpr int kThreads = kWarps * 32;
constexpr int kKvTile = 64;  // KV positions per shared-memory stage
static_assert(kPrefillTileRows == kKvTile, "the Q staging reuses one K stage");

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; when !on, writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool on) {
  const int src_bytes = on ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void Ldmatrix4(uint32_t address, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t address, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

template <typename T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  MmaM16N8K16<T>(c, a, {b0, b1});
}

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled (rows, D) 16-bit tile.
template <int D>
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

template <typename T, int D, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    PrefillAttentionKernel(PrefillAttentionParams<T> p, PagedKv<T> kv, int group, int bt_shift,
                           float scale_log2) {
  constexpr int kTileElems = kKvTile * D;  // one K or V stage
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  constexpr int kPasses = kKvTile / kRowsPerPass;
  constexpr int kDSteps = D / 16;  // k-steps of Q·K^T, pairs of n-tiles of P·V
  // Stage s: K at [2s], V at [2s + 1] (kTileElems each). Q is staged in stage 1's K.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);

  const PrefillTile tile = p.tiles[blockIdx.x];
  if (tile.num_tokens <= 0) return;
  const int kv_head = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kv_end = tile.first_pos + tile.num_tokens;  // positions [0, kv_end) are read
  const int num_kv_tiles = (kv_end + kKvTile - 1) / kKvTile;
  // A sliding window: the tile's first query reads from first_pos - window + 1 on, so the
  // KV tiles before that one are never visited; the rest are masked per row.
  const int window = p.scores.window > 0 ? p.scores.window : INT_MAX;
  const int first_kv_tile = max(0, tile.first_pos - window + 1) / kKvTile;
  const float cap_raw = p.scores.logit_softcap * 1.44269504f / scale_log2;  // cap / scale; 0: none
  const int32_t* table = kv.indices + kv.indptr[tile.chunk];
  const int64_t k_head_offset = static_cast<int64_t>(kv_head) * kv.block_tokens * D;  // within a layer slice
  const int64_t v_delta = static_cast<int64_t>(kv.num_kv_heads) * kv.block_tokens * D;
  const int in_block_mask = kv.block_tokens - 1;
  const int load_chunk = tid % kChunksPerRow;
  const int load_row0 = tid / kChunksPerRow;

  // Rows beyond the tile's tokens (and beyond the context) are zero-filled, so that no
  // stale or unwritten pool bytes (possibly NaN) meet a zero softmax weight.
  auto load_kv = [&](int kv_tile, int stage) {
    T* sk = smem + 2 * stage * kTileElems;
    T* sv = sk + kTileElems;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int row = load_row0 + i * kRowsPerPass;
      const int pos = kv_tile * kKvTile + row;
      const bool on = pos < kv_end;
      const int offset = Swizzled<D>(row, load_chunk);
      if constexpr (kFp8) {
        // 8 codes per 16-byte chunk, dequantized in registers and stored to the same
        // swizzled place (plain loads: cp.async cannot convert). Off rows store zeros.
        uint4 k = make_uint4(0, 0, 0, 0), v = k;
        if (on) {
          // A pool block or a staged slot (host-resident KV).
          const Fp8Layer slice = Fp8LayerOf<D>(kv, __ldg(table + (pos >> bt_shift)), p.layer);
          const int64_t k_row = k_head_offset + static_cast<int64_t>(pos & in_block_mask) * D;
          const uint2 kc = __ldg(reinterpret_cast<const uint2*>(slice.codes + k_row + load_chunk * 8));
          const uint2 vc =
              __ldg(reinterpret_cast<const uint2*>(slice.codes + k_row + v_delta + load_chunk * 8));
          k = DequantFp8x8<T>(kc, __ldg(slice.scales + k_row / D));
          v = DequantFp8x8<T>(vc, __ldg(slice.scales + (k_row + v_delta) / D));
        }
        *reinterpret_cast<uint4*>(sk + offset) = k;
        *reinterpret_cast<uint4*>(sv + offset) = v;
        continue;
      }
      const T* src = kv.pool;
      if (on) {
        const int32_t block = __ldg(table + (pos >> bt_shift));
        src = KvLayerBase(kv, block, p.layer) + k_head_offset +
              static_cast<int64_t>(pos & in_block_mask) * D + load_chunk * 8;
      }
      CpAsync16(SmemAddress(sk + offset), src, on);
      CpAsync16(SmemAddress(sv + offset), on ? src + v_delta : src, on);
    }
  };

  {  // Q rows -> stage 1's K buffer (free until tile 1 is prefetched).
    T* sq = smem + 2 * kTileElems;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int row = load_row0 + i * kRowsPerPass;
      const int token = row / group;
      const bool on = token < tile.num_tokens;
      const T* src = p.q;
      if (on) {
        const int head = kv_head * group + (row - token * group);
        src = p.q + (static_cast<int64_t>(tile.token_begin + token) * p.num_heads + head) * D +
              load_chunk * 8;
      }
      CpAsync16(SmemAddress(sq + Swizzled<D>(row, load_chunk)), src, on);
    }
    CpAsyncCommit();
  }
  load_kv(first_kv_tile, 0);
  CpAsyncCommit();

  // This thread's two accumulator rows: g and g + 8 of the warp's 16.
  const int row_lo = warp * 16 + (lane >> 2);
  const bool warp_active = warp * 16 < tile.num_tokens * group;
  int row_pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int token = min((row_lo + 8 * h) / group, tile.num_tokens - 1);
    row_pos[h] = tile.first_pos + token;
  }

  uint32_t q_frag[kDSteps][4];
  CpAsyncWait<1>();
  __syncthreads();
  {
    const T* sq = smem + 2 * kTileElems;
    const int row = warp * 16 + (lane & 15);
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      Ldmatrix4(SmemAddress(sq + Swizzled<D>(row, kk * 2 + (lane >> 4))), q_frag[kk]);
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  }
  float m[2] = {-INFINITY, -INFINITY};  // running max of scaled scores (log2 domain)
  float l[2] = {0.0f, 0.0f};            // this thread's part of the running sum

  for (int j = first_kv_tile; j < num_kv_tiles; ++j) {
    const int stage = (j - first_kv_tile) & 1;
    CpAsyncWait<0>();
    __syncthreads();  // tile j visible to all; everyone is done with tile j-1 and with Q
    if (j + 1 < num_kv_tiles) load_kv(j + 1, stage ^ 1);
    CpAsyncCommit();
    if (!warp_active) continue;
    const T* sk = smem + 2 * stage * kTileElems;
    const T* sv = sk + kTileElems;

    float s[kKvTile / 8][4];
#pragma unroll
    for (int n = 0; n < kKvTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
#pragma unroll
      for (int np = 0; np < kKvTile / 16; ++np) {
        uint32_t b[4];
        const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3);
        Ldmatrix4(SmemAddress(sk + Swizzled<D>(row, kk * 2 + ((lane >> 3) & 1))), b);
        Mma<T>(s[2 * np], q_frag[kk], b[0], b[1]);
        Mma<T>(s[2 * np + 1], q_frag[kk], b[2], b[3]);
      }
    }

    if (cap_raw > 0.0f) SoftCapScores(s, cap_raw);
    MaskPastPositions(s, j * kKvTile, tile.first_pos, row_pos, lane);
    if (window != INT_MAX) MaskBeforeWindow(s, j * kKvTile, row_pos, window, lane);
    float correction[2];
    OnlineSoftmax(s, m, l, scale_log2, correction);
    RescaleRows(o, correction);

    // P (the S accumulators, as 16-bit A fragments) · V.
#pragma unroll
    for (int kk = 0; kk < kKvTile / 16; ++kk) {
      uint32_t a[4];
      ProbabilityFragment<T>(s, kk, a);
      const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int dn = 0; dn < kDSteps; ++dn) {
        uint32_t b[4];
        Ldmatrix4Trans(SmemAddress(sv + Swizzled<D>(row, dn * 2 + (lane >> 4))), b);
        Mma<T>(o[2 * dn], a, b[0], b[1]);
        Mma<T>(o[2 * dn + 1], a, b[2], b[3]);
      }
    }
  }
  CpAsyncWait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  if (!warp_active) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row_lo + 8 * h;
    const int token = row / group;
    if (token >= tile.num_tokens) continue;
    const int head = kv_head * group + (row - token * group);
    T* dst = p.out + (static_cast<int64_t>(tile.token_begin + token) * p.num_heads + head) * D +
                (lane & 3) * 2;
    const float inv = 1.0f / l[h];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) =
          PackFloat2<T>(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
  }
}

template <typename T, int D, bool kFp8>
cudaError_t LaunchHeadDim(const PrefillAttentionParams<T>& p, PagedKv<T> kv, int group,
                          int bt_shift, cudaStream_t stream) {
  auto kernel = PrefillAttentionKernel<T, D, kFp8>;
  const int smem = static_cast<int>(4 * kKvTile * D * sizeof(T));
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (err != cudaSuccess) return err;
  const double scale = p.scores.scale > 0.0f ? p.scores.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const float scale_log2 = static_cast<float>(scale * M_LOG2E);
  const dim3 grid(static_cast<unsigned>(p.num_tiles), static_cast<unsigned>(kv.num_kv_heads));
  kernel<<<grid, kThreads, smem, stream>>>(p, kv, group, bt_shift, scale_log2);
  return cudaGetLastError();
}

}  // namespace

bool PrefillAttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  if (head_dim != 64 && head_dim != 128) return false;
  if (num_kv_heads <= 0 || num_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  return num_heads / num_kv_heads <= kPrefillTileRows;
}

template <typename T>
cudaError_t PrefillAttention(const PrefillAttentionParams<T>& params, PagedKv<T> kv,
                             cudaStream_t stream) {
  if (params.num_tiles == 0) return cudaSuccess;
  if (!PrefillAttentionSupported(kv.head_dim, params.num_heads, kv.num_kv_heads)) {
    return cudaErrorInvalidValue;
  }
  const int bt = kv.block_tokens;
  if (bt <= 0 || (bt & (bt - 1)) != 0) return cudaErrorInvalidValue;
  // 16-byte cp.async sources: q rows and pool rows must be 16-byte aligned.
  if (reinterpret_cast<uintptr_t>(params.q) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(kv.pool) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(params.out) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  int bt_shift = 0;
  while ((1 << bt_shift) < bt) ++bt_shift;
  const int group = params.num_heads / kv.num_kv_heads;
  const AttentionScores& scores = params.scores;
  if (scores.scale < 0.0f || scores.logit_softcap < 0.0f || scores.window < 0) return cudaErrorInvalidValue;
  if (params.kernel == PrefillKernel::kWgmma) {
    // Scores other than plain run on its kScores instances.
    if constexpr (std::is_same_v<T, bf16>) {
      if (!PrefillWgmmaSupported(true, kv.head_dim, params.num_heads, kv.num_kv_heads)) return cudaErrorInvalidValue;
      if (kv.fp8 && kv.block_bytes < kv.block_elements) return cudaErrorInvalidValue;
      return PrefillAttentionWgmma(params, kv, bt_shift, stream, params.wgmma_variant);
    } else {
      return cudaErrorInvalidValue;
    }
  }
  if (kv.fp8) {
    if (kv.block_bytes < kv.block_elements) return cudaErrorInvalidValue;
    if (kv.head_dim == 128) return LaunchHeadDim<T, 128, true>(params, kv, group, bt_shift, stream);
    return LaunchHeadDim<T, 64, true>(params, kv, group, bt_shift, stream);
  }
  if (kv.head_dim == 128) return LaunchHeadDim<T, 128, false>(params, kv, group, bt_shift, stream);
  return LaunchHeadDim<T, 64, false>(params, kv, group, bt_shift, stream);
}

#define KVTIER_INSTANTIATE(T)                                                         \
  template cudaError_t PrefillAttention<T>(const PrefillAttentionParams<T>&, PagedKv<T>, \
                                           cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
