// QuantizeQueriesFp8, KvGatherFp8 and DequantizeOutputFp8 (see attention_fp8_inputs.h). The
// inputs: a grid-stride maximum (block maxima, then one atomicMax per block on the float's
// bits, which orders non-negative floats as integers), then the codes, every block reading the
// finished maximum. The output: one grid-stride pass.
#include "backend/cuda/attention_fp8_inputs.h"

#include <algorithm>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/kv_fp8.cuh"

namespace kvtier::cuda {
namespace {

constexpr float kE4M3Max = 448.0f;
constexpr int kThreads = 256;

__device__ __forceinline__ void AtomicMaxNonNegative(float* slot, float v) {
  atomicMax(reinterpret_cast<int*>(slot), __float_as_int(v));
}

// The scale a maximum gives codes (448 / amax), and the descale the graph multiplies by.
__device__ __forceinline__ float ScaleOf(float amax) { return amax > 0.0f ? kE4M3Max / amax : 1.0f; }
__device__ __forceinline__ float DescaleOf(float amax) { return amax > 0.0f ? amax / kE4M3Max : 1.0f; }

int Blocks(int64_t items) {
  return static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, 4096));
}

__global__ void InitFactorsKernel(Fp8AttentionFactors* f) {
  *f = Fp8AttentionFactors{};
  f->descale_s = 1.0f / kE4M3Max;
  f->scale_s = kE4M3Max;
  f->scale_o = 1.0f;
  f->descale_o = 1.0f;
}

__global__ void QueriesAmaxKernel(const bf16* q, int64_t pieces, Fp8AttentionFactors* f) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pieces;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = reinterpret_cast<const uint4*>(q)[i];
    const bf16* h = reinterpret_cast<const bf16*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(__bfloat162float(h[j])));
  }
  m = BlockMax(m);
  if (threadIdx.x == 0) AtomicMaxNonNegative(&f->amax_q, m);
}

__global__ void QueriesCodesKernel(const bf16* q, int64_t pieces, uint8_t* codes, Fp8AttentionFactors* f) {
  const float amax = f->amax_q, scale = ScaleOf(amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) f->descale_q = DescaleOf(amax);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pieces;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = reinterpret_cast<const uint4*>(q)[i];
    const bf16* h = reinterpret_cast<const bf16*>(&v);
    uint32_t w[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t lo = Float2ToFp8x2(__bfloat162float(h[4 * j]) * scale, __bfloat162float(h[4 * j + 1]) * scale);
      const uint32_t hi =
          Float2ToFp8x2(__bfloat162float(h[4 * j + 2]) * scale, __bfloat162float(h[4 * j + 3]) * scale);
      w[j] = (lo & 0xffffu) | (hi << 16);
    }
    reinterpret_cast<uint2*>(codes)[i] = make_uint2(w[0], w[1]);
  }
}

// The pool's row of (side, head, position) within its layer, and the layer's codes and scales.
struct KvRow {
  Fp8Layer layer;
  int64_t row;
};
template <int D>
__device__ __forceinline__ KvRow KvRowOf(const KvGatherFp8Params& p, const PagedKv<bf16>& kv, int side, int head,
                                            int64_t pos) {
  const int32_t* table = kv.indices + kv.indptr[p.chunk];
  const int32_t entry = table[pos / kv.block_tokens];
  const int token = static_cast<int>(pos % kv.block_tokens);
  return {Fp8LayerOf<D>(kv, entry, p.layer),
          (static_cast<int64_t>(side) * kv.num_kv_heads + head) * kv.block_tokens + token};
}

// One thread per (side, position, head) row: the largest row scale of each side.
template <int D>
__global__ void KvScaleMaxKernel(KvGatherFp8Params p, PagedKv<bf16> kv, Fp8AttentionFactors* f) {
  const int64_t per_side = p.num_positions * kv.num_kv_heads;
  float m[2] = {0.0f, 0.0f};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < 2 * per_side;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int side = i >= per_side ? 1 : 0;
    const int64_t j = i - side * per_side;
    const KvRow r = KvRowOf<D>(p, kv, side, static_cast<int>(j % kv.num_kv_heads), j / kv.num_kv_heads);
    m[side] = fmaxf(m[side], r.layer.scales[r.row]);
  }
  const float k = BlockMax(m[0]), v = BlockMax(m[1]);
  if (threadIdx.x == 0) {
    AtomicMaxNonNegative(&f->amax_k, k);
    AtomicMaxNonNegative(&f->amax_v, v);
  }
}

// One thread per 8 codes of one output row: code' = E4M3(decode(code) * row scale / side's).
template <int D>
__global__ void KvCodesKernel(KvGatherFp8Params p, PagedKv<bf16> kv, Fp8AttentionFactors* f) {
  constexpr int kPieces = D / 8;
  const float side_scale[2] = {f->amax_k, f->amax_v};
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    f->descale_k = side_scale[0] > 0.0f ? side_scale[0] : 1.0f;
    const float descale_v = side_scale[1] > 0.0f ? side_scale[1] : 1.0f;
    f->descale_v = descale_v;
    f->scale_o = 0.5f / descale_v;
    f->descale_o = 2.0f * descale_v;
  }
  const int64_t per_side = p.padded_positions * kv.num_kv_heads * kPieces;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < 2 * per_side;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int side = i >= per_side ? 1 : 0;
    const int64_t j = i - side * per_side;
    const int piece = static_cast<int>(j % kPieces);
    const int head = static_cast<int>(j / kPieces % kv.num_kv_heads);
    const int64_t pos = j / kPieces / kv.num_kv_heads;
    uint2 out = make_uint2(0, 0);
    if (pos < p.num_positions) {
      const KvRow r = KvRowOf<D>(p, kv, side, head, pos);
      const float ratio = side_scale[side] > 0.0f ? r.layer.scales[r.row] / side_scale[side] : 0.0f;
      const uint2 codes = *reinterpret_cast<const uint2*>(r.layer.codes + r.row * D + piece * 8);
      const uint32_t words[2] = {codes.x, codes.y};
      uint32_t w[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float2 a = Fp8x2ToFloat2(words[k] & 0xffffu), b = Fp8x2ToFloat2(words[k] >> 16);
        w[k] = (Float2ToFp8x2(a.x * ratio, a.y * ratio) & 0xffffu) | (Float2ToFp8x2(b.x * ratio, b.y * ratio) << 16);
      }
      out = make_uint2(w[0], w[1]);
    }
    uint8_t* dst = side == 0 ? p.k_out : p.v_out;
    *reinterpret_cast<uint2*>(dst + (pos * kv.num_kv_heads + head) * D + piece * 8) = out;
  }
}

// One thread per 8 codes: out = bf16(decode(code) * descale_o).
__global__ void OutputDequantKernel(const uint8_t* codes, int64_t pieces, const Fp8AttentionFactors* f, bf16* out) {
  const float descale = f->descale_o;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pieces;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    reinterpret_cast<uint4*>(out)[i] = DequantFp8x8<bf16>(reinterpret_cast<const uint2*>(codes)[i], descale);
  }
}

}  // namespace

cudaError_t InitFp8AttentionFactors(Fp8AttentionFactors* factors, cudaStream_t stream) {
  if (factors == nullptr) return cudaErrorInvalidValue;
  InitFactorsKernel<<<1, 1, 0, stream>>>(factors);
  return cudaGetLastError();
}

cudaError_t QuantizeQueriesFp8(const bf16* q, int64_t elements, uint8_t* codes, Fp8AttentionFactors* factors,
                               cudaStream_t stream) {
  if (q == nullptr || codes == nullptr || factors == nullptr || elements < 0 || elements % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  if (cudaError_t e = cudaMemsetAsync(&factors->amax_q, 0, sizeof(float), stream); e != cudaSuccess) return e;
  const int64_t pieces = elements / 8;
  QueriesAmaxKernel<<<Blocks(pieces), kThreads, 0, stream>>>(q, pieces, factors);
  QueriesCodesKernel<<<Blocks(pieces), kThreads, 0, stream>>>(q, pieces, codes, factors);
  return cudaGetLastError();
}

cudaError_t KvGatherFp8(const KvGatherFp8Params& params, const PagedKv<bf16>& kv, Fp8AttentionFactors* factors,
                        cudaStream_t stream) {
  if (params.k_out == nullptr || params.v_out == nullptr || factors == nullptr || params.num_positions < 0 ||
      params.padded_positions < params.num_positions || !kv.fp8 || kv.num_kv_heads <= 0 || kv.block_tokens <= 0 ||
      (kv.head_dim != 64 && kv.head_dim != 128)) {
    return cudaErrorInvalidValue;
  }
  if (cudaError_t e = cudaMemsetAsync(&factors->amax_k, 0, 2 * sizeof(float), stream); e != cudaSuccess) return e;
  const int64_t rows = 2 * params.num_positions * kv.num_kv_heads;
  const int64_t pieces = 2 * params.padded_positions * kv.num_kv_heads * (kv.head_dim / 8);
  if (kv.head_dim == 64) {
    KvScaleMaxKernel<64><<<Blocks(rows), kThreads, 0, stream>>>(params, kv, factors);
    KvCodesKernel<64><<<Blocks(pieces), kThreads, 0, stream>>>(params, kv, factors);
  } else {
    KvScaleMaxKernel<128><<<Blocks(rows), kThreads, 0, stream>>>(params, kv, factors);
    KvCodesKernel<128><<<Blocks(pieces), kThreads, 0, stream>>>(params, kv, factors);
  }
  return cudaGetLastError();
}

cudaError_t DequantizeOutputFp8(const uint8_t* codes, int64_t elements, const Fp8AttentionFactors* factors, bf16* out,
                                cudaStream_t stream) {
  if (codes == nullptr || out == nullptr || factors == nullptr || elements < 0 || elements % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  if (elements == 0) return cudaSuccess;
  const int64_t pieces = elements / 8;
  OutputDequantKernel<<<Blocks(pieces), kThreads, 0, stream>>>(codes, pieces, factors, out);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
