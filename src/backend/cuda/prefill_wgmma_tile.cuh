// Device pieces of the wgmma prefill attention (prefill_attention_wgmma.cu): the shared-memory
// layout, the copies of Q and paged K/V tiles, the fp8 dequantization, and one warpgroup's
// rows (S = Q K^T, the online softmax, O += P V). Included by that file alone.
#ifndef KVTIER_BACKEND_CUDA_PREFILL_WGMMA_TILE_CUH_
#define KVTIER_BACKEND_CUDA_PREFILL_WGMMA_TILE_CUH_

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/online_softmax.cuh"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/wgmma.cuh"

namespace kvtier::cuda::prefill_wgmma {


constexpr int kD = 128;
constexpr int kThreads = 256;
constexpr int kRows = kPrefillWgmmaTileRows;  // 2 warpgroups x 64
static_assert(kRows == 2 * 64, "two consumer warpgroups of 64 rows");
constexpr int kRowBytes = 128;                // one swizzle row: 64 bf16 dims
constexpr int kQBytes = kRows * kD * 2;
// 1 / sqrt(head_dim) in the log2 domain of the softmax.
constexpr float kScaleLog2 = 0.08838834764831845f * 1.4426950408889634f;

// The scores a kernel forms (AttentionScores, kernels.h) in the online softmax's terms, as the
// mma.sync kernel takes them: scale_log2 = log2(e) x the scale; cap_raw = the soft-cap over the
// scale (0: none), applied to raw Q.K so that scale_log2 times the capped score is log2(e) x
// cap x tanh(scale q.k / cap), the cap on the real score; window INT_MAX where there is none.
// Plain kernels (kScores false) read scale_log2 alone.
struct ScoreRule {
  float scale_log2 = kScaleLog2;
  float cap_raw = 0.0f;
  int window = INT_MAX;
};

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool on) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(on ? 16 : 0) : "memory");
}
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, bool on) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(on ? 4 : 0) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Byte offset of 16-byte chunk `chunk` (0..15 over the 128 dims) of row `row` in a swizzled
// (ROWS, 128) bf16 tile: column block chunk / 8 (ROWS x 128 B), then the row, then the chunk
// XOR the row's place in its 8-row (1024-byte) swizzle atom.
template <int ROWS>
__device__ __forceinline__ uint32_t Swizzled(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * ROWS * kRowBytes + row * kRowBytes + (((chunk & 7) ^ (row & 7)) << 4));
}

// N-major 128-byte-swizzled descriptor (B = V, transposed): 64-dim column blocks `block_bytes`
// apart (leading byte offset), 8-position row groups 1024 bytes apart (stride byte offset).
__device__ __forceinline__ uint64_t WgmmaDescNMajor(uint32_t addr, uint32_t block_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(block_bytes >> 4) << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// O(64 x 128) += P(64 x 16, registers) * V(16 x 128, shared, N-major).
__device__ __forceinline__ void WgmmaPv(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b) {
#if KVTIER_SKINNY_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,"
      "%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, "
      "1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
        "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
        "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#endif
}

template <int kKvTile, int kStages, bool kFp8>
struct WgmmaTiles {
  static constexpr int kTileBytes = kKvTile * kD * 2;                     // one bf16 K or V tile
  static constexpr int kCodeBytes = kKvTile * kD;                          // one tile of fp8 codes
  static constexpr int kStageBytes = kFp8 ? 2 * kCodeBytes + 2 * kKvTile * 4  // codes + row scales
                                          : 2 * kTileBytes;
  static constexpr int kConvBytes = kFp8 ? 2 * kTileBytes : 0;             // dequantized K and V
  static constexpr int kSmemBytes = kQBytes + kConvBytes + kStages * kStageBytes + 1024;  // + alignment slack
  static_assert(kFp8 || kStageBytes % 1024 == 0, "bf16 stages keep the 1024-byte swizzle alignment");
};

// What every thread of a CTA knows about its tile and kv head.
struct TileView {
  PrefillTile tile;
  int kv_head;
  int kv_end;  // positions [0, kv_end) are read
  int num_kv_tiles;
  // The first KV tile any row reads: the tile's first query reads from first_pos - window + 1
  // on (its later queries from further on), so the tiles before that one are never visited.
  int first_kv_tile;
  const int32_t* table;
  int64_t k_head_offset;  // within a layer slice
  int64_t v_delta;
  int in_block_mask;

  // window: ScoreRule::window (INT_MAX: every tile from 0).
  template <int kKvTile>
  __device__ __forceinline__ TileView(const PrefillAttentionParams<bf16>& p, const PagedKv<bf16>& kv,
                                      std::integral_constant<int, kKvTile>, int window)
      : tile(p.tiles[blockIdx.x]),
        kv_head(static_cast<int>(blockIdx.y)),
        kv_end(tile.first_pos + tile.num_tokens),
        num_kv_tiles((kv_end + kKvTile - 1) / kKvTile),
        first_kv_tile(max(0, tile.first_pos - window + 1) / kKvTile),
        table(kv.indices + kv.indptr[tile.chunk]),
        k_head_offset(static_cast<int64_t>(kv_head) * kv.block_tokens * kD),
        v_delta(static_cast<int64_t>(kv.num_kv_heads) * kv.block_tokens * kD),
        in_block_mask(kv.block_tokens - 1) {}
};

// Copies of KV tile `kv_tile` into the stage at `base` by `kLoaders` threads (this one is
// `loader` of them). Rows past the tile's last position are zero-filled, so that no stale or
// unwritten pool bytes (possibly NaN) meet a zero softmax weight.
template <int kKvTile, int kLoaders, bool kFp8>
__device__ __forceinline__ void LoadKvTile(const TileView& t, const PagedKv<bf16>& kv, int layer, int bt_shift,
                                           int kv_tile, uint32_t base, int loader) {
  using C = WgmmaTiles<kKvTile, 2, kFp8>;
  if constexpr (kFp8) {
    // 8 chunks of 16 codes per row; then one 4-byte row scale per (row, k|v).
    constexpr int kRowsPerPass = kLoaders / 8;
    const int chunk = loader & 7;
#pragma unroll 4
    for (int row = loader / 8; row < kKvTile; row += kRowsPerPass) {
      const int pos = kv_tile * kKvTile + row;
      const bool on = pos < t.kv_end;
      const uint8_t* k_src = reinterpret_cast<const uint8_t*>(kv.pool);
      const uint8_t* v_src = k_src;
      if (on) {
        const Fp8Layer slice = Fp8LayerOf<kD>(kv, __ldg(t.table + (pos >> bt_shift)), layer);
        k_src = slice.codes + t.k_head_offset + static_cast<int64_t>(pos & t.in_block_mask) * kD + chunk * 16;
        v_src = k_src + t.v_delta;
      }
      CpAsync16(base + row * kD + chunk * 16, k_src, on);
      CpAsync16(base + C::kCodeBytes + row * kD + chunk * 16, v_src, on);
    }
    for (int i = loader; i < 2 * kKvTile; i += kLoaders) {
      const int row = i % kKvTile, is_v = i / kKvTile;
      const int pos = kv_tile * kKvTile + row;
      const bool on = pos < t.kv_end;
      const float* src = reinterpret_cast<const float*>(kv.pool);
      if (on) {
        const Fp8Layer slice = Fp8LayerOf<kD>(kv, __ldg(t.table + (pos >> bt_shift)), layer);
        const int64_t k_row = t.k_head_offset + static_cast<int64_t>(pos & t.in_block_mask) * kD;
        src = slice.scales + (k_row + is_v * t.v_delta) / kD;
      }
      CpAsync4(base + 2 * C::kCodeBytes + i * 4, src, on);
    }
  } else {
    // 16 chunks of 8 dims per row, swizzled.
    constexpr int kRowsPerPass = kLoaders / 16;
    const int chunk = loader & 15;
#pragma unroll 4
    for (int row = loader / 16; row < kKvTile; row += kRowsPerPass) {
      const int pos = kv_tile * kKvTile + row;
      const bool on = pos < t.kv_end;
      const bf16* src = kv.pool;
      if (on) {
        src = KvLayerBase(kv, __ldg(t.table + (pos >> bt_shift)), layer) + t.k_head_offset +
              static_cast<int64_t>(pos & t.in_block_mask) * kD + chunk * 8;
      }
      const uint32_t offset = Swizzled<kKvTile>(row, chunk);
      CpAsync16(base + offset, src, on);
      CpAsync16(base + C::kTileBytes + offset, on ? src + t.v_delta : src, on);
    }
  }
}

// Q rows of the tile (zero past its tokens) by `kLoaders` threads, swizzled.
template <int kLoaders>
__device__ __forceinline__ void LoadQ(const TileView& t, const PrefillAttentionParams<bf16>& p, int group,
                                      uint32_t q_base, int row_begin, int row_end, int loader) {
  const int chunk = loader & 15;
  for (int row = row_begin + loader / 16; row < row_end; row += kLoaders / 16) {
    const int token = row / group;
    const bool on = token < t.tile.num_tokens;
    const bf16* src = p.q;
    if (on) {
      const int head = t.kv_head * group + (row - token * group);
      src = p.q + (static_cast<int64_t>(t.tile.token_begin + token) * p.num_heads + head) * kD + chunk * 8;
    }
    CpAsync16(q_base + Swizzled<kRows>(row, chunk), src, on);
  }
}

// fp8: `loader` of `kLoaders` threads' share of a stage's codes -> the bf16 K and V tiles at
// `conv` in the swizzled layout (code -> half exact, times the row's scale, rounded to bf16).
template <int kKvTile, int kLoaders>
__device__ __forceinline__ void DequantizeStage(const uint8_t* codes, uint8_t* conv, int loader) {
  using C = WgmmaTiles<kKvTile, 2, true>;
  const float* scales = reinterpret_cast<const float*>(codes + 2 * C::kCodeBytes);
#pragma unroll 4
  for (int c = loader; c < kKvTile * 16; c += kLoaders) {
    const int row = c >> 4, chunk = c & 15;
    const uint32_t dst = Swizzled<kKvTile>(row, chunk);
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const uint2 raw = *reinterpret_cast<const uint2*>(codes + v * C::kCodeBytes + row * kD + chunk * 8);
      *reinterpret_cast<uint4*>(conv + v * C::kTileBytes + dst) = DequantFp8x8<bf16>(raw, scales[v * kKvTile + row]);
    }
  }
}

// One warpgroup's 64 query rows: the O accumulators and the running max and sum of its two
// rows per thread (g and g + 8 of its warp's 16), fed one KV tile at a time. kScores: the
// scores take ScoreRule's soft-cap and window too (else q.k / sqrt(head_dim), causal only).
template <int kKvTile, bool kScores = false>
struct RowState {
  float o[kD / 8][4];
  float m[2], l[2];
  int row_pos[2];
  int row_lo;  // this thread's first row within the CTA

  __device__ __forceinline__ RowState(const TileView& t, int group, int warp, int lane) {
    row_lo = warp * 16 + (lane >> 2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int token = min((row_lo + 8 * h) / group, t.tile.num_tokens - 1);
      row_pos[h] = t.tile.first_pos + token;
      m[h] = -INFINITY;
      l[h] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
    }
  }

  // S = Q K^T for the KV tile at k_base, issued and committed (not waited for).
  __device__ __forceinline__ static void IssueS(float (&s)[kKvTile / 8][4], uint32_t q_rows, uint32_t k_base) {
#pragma unroll
    for (int n = 0; n < kKvTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
    }
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t block = kk >> 2, in_block = (kk & 3) * 32;
      Wgmma64xN<kKvTile>(s, WgmmaDesc(q_rows + block * kRows * kRowBytes + in_block),
                         WgmmaDesc(k_base + block * kKvTile * kRowBytes + in_block));
    }
    WgmmaCommit();
  }

  // After a wgmma wait: the accumulators are read only after it (the asm statements keep
  // the compiler from moving their uses above the wait).
  template <int N>
  __device__ __forceinline__ static void Settle(float (&r)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(r[n][e])::"memory");
    }
  }

  // Soft-cap, causal and window masks and online softmax of tile j's scores into P (register
  // A fragments: k-step kk covers positions [16 kk, 16 kk + 16)) and the factor O must be
  // scaled by before P V. The order is the mma.sync kernel's: the cap on raw scores before
  // the masks (tanh would lift a -inf), then the scale in the softmax.
  __device__ __forceinline__ void Softmax(float (&s)[kKvTile / 8][4], int j, int first_pos, int lane,
                                          const ScoreRule& rule, uint32_t (&pa)[kKvTile / 16][4],
                                          float (&correction)[2]) {
    if constexpr (kScores) {
      if (rule.cap_raw > 0.0f) SoftCapScores(s, rule.cap_raw);
    }
    MaskPastPositions(s, j * kKvTile, first_pos, row_pos, lane);
    if constexpr (kScores) {
      if (rule.window != INT_MAX) MaskBeforeWindow(s, j * kKvTile, row_pos, rule.window, lane);
    }
    OnlineSoftmax(s, m, l, rule.scale_log2, correction);
#pragma unroll
    for (int kk = 0; kk < kKvTile / 16; ++kk) ProbabilityFragment<bf16>(s, kk, pa[kk]);
  }

  __device__ __forceinline__ void Rescale(const float (&correction)[2]) { RescaleRows(o, correction); }

  // O += P V with V at v_base, issued and committed (not waited for).
  __device__ __forceinline__ void IssuePv(const uint32_t (&pa)[kKvTile / 16][4], uint32_t v_base) {
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kKvTile / 16; ++kk) {
      WgmmaPv(o, pa[kk], WgmmaDescNMajor(v_base + kk * 16 * kRowBytes, kKvTile * kRowBytes));
    }
    WgmmaCommit();
  }

  // The whole of KV tile j at k_base (V after it); returns with its MMAs complete.
  __device__ __forceinline__ void Tile(uint32_t q_rows, uint32_t k_base, int j, int first_pos, int lane,
                                       const ScoreRule& rule) {
    float s[kKvTile / 8][4];
    IssueS(s, q_rows, k_base);
    WgmmaWait<0>();
    Settle(s);
    uint32_t pa[kKvTile / 16][4];
    float correction[2];
    Softmax(s, j, first_pos, lane, rule, pa, correction);
    Rescale(correction);
    IssuePv(pa, k_base + kKvTile * kD * 2);
    WgmmaWait<0>();
    Settle(o);
  }

  __device__ __forceinline__ void Store(const TileView& t, const PrefillAttentionParams<bf16>& p, int group,
                                        int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_lo + 8 * h;
      const int token = row / group;
      if (token >= t.tile.num_tokens) continue;
      const int head = t.kv_head * group + (row - token * group);
      bf16* dst =
          p.out + (static_cast<int64_t>(t.tile.token_begin + token) * p.num_heads + head) * kD + (lane & 3) * 2;
      const float inv = 1.0f / l[h];
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dst + n * 8) = PackFloat2<bf16>(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
      }
    }
  }
};

}  // namespace kvtier::cuda::prefill_wgmma

#endif  // KVTIER_BACKEND_CUDA_PREFILL_WGMMA_TILE_CUH_
