// Elementwise and row-wise kernels of the forward (semantics in kernels.h). Stateless.
#include <cfloat>
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float BlockSum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float x = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0f;
    x = WarpSum(x);
    if (lane == 0) total = x;
  }
  __syncthreads();
  return total;
}

__global__ void EmbeddingGatherKernel(const int32_t* ids, const bf16* table, int dim,
                                      float* residual) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t row = blockIdx.x;
  const bf16* src = table + static_cast<int64_t>(ids[row]) * dim;
  float* dst = residual + row * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
}

template <bool kEarly>
__global__ void AddRmsNormKernel(float* residual, const bf16* add, const float* weight,
                                 const int32_t* row_map, int dim, float eps, bf16* out) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  const int64_t s = row_map != nullptr ? row_map[r] : r;
  float* x = residual + s * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = x[i];
    if (add != nullptr) {
      v += __bfloat162float(add[s * dim + i]);
      x[i] = v;
    }
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  bf16* o = out + r * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    o[i] = __float2bfloat16(weight[i] * (x[i] * inv_rms));
  }
}

// One warp per (token, head) of the fused q|k|v row; lane handles pairs (i, i + half) for
// i = lane + 32j, so head_dim <= 256.
template <bool kEarly>
__global__ void QkvPostKernel(QkvPostParams p, StepTokens tokens, PagedKv kv) {
  PdlEnter<kEarly>();
  constexpr int kPairsPerLane = 4;
  const int t = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  const int d = kv.head_dim, half = d / 2;
  const int total_heads = p.num_heads + 2 * kv.num_kv_heads;
  const int width = total_heads * d;
  const int pos = tokens.pos[t];
  const int chunk = tokens.chunk[t];
  const int32_t block = kv.indices[kv.indptr[chunk] + pos / kv.block_tokens];
  bf16* block_base = kv.pool + static_cast<int64_t>(block) * kv.block_elements;
  for (int head = threadIdx.x >> 5; head < total_heads; head += warps) {
    const bool is_q = head < p.num_heads;
    const bool is_k = !is_q && head < p.num_heads + kv.num_kv_heads;
    const bf16* in = p.qkv + static_cast<int64_t>(t) * width + head * d;
    const float* bias = p.bias != nullptr ? p.bias + head * d : nullptr;
    float x1[kPairsPerLane], x2[kPairsPerLane];
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      x1[j] = x2[j] = 0.0f;
      if (i < half) {
        x1[j] = __bfloat162float(in[i]);
        x2[j] = __bfloat162float(in[i + half]);
        if (bias != nullptr) {
          x1[j] += bias[i];
          x2[j] += bias[i + half];
        }
        sum_sq += x1[j] * x1[j] + x2[j] * x2[j];
      }
    }
    const float* norm = is_q ? p.q_norm : (is_k ? p.k_norm : nullptr);
    if (norm != nullptr) {
      const float inv_rms = rsqrtf(WarpSum(sum_sq) / static_cast<float>(d) + p.norm_eps);
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) {
        const int i = lane + 32 * j;
        if (i < half) {
          x1[j] = norm[i] * (x1[j] * inv_rms);
          x2[j] = norm[i + half] * (x2[j] * inv_rms);
        }
      }
    }
    bf16* dst;
    if (is_q) {
      dst = p.q_out + (static_cast<int64_t>(t) * p.num_heads + head) * d;
    } else {
      const int kv_sel = is_k ? 0 : 1;
      const int kv_head = head - p.num_heads - kv_sel * kv.num_kv_heads;
      dst = block_base +
            ((static_cast<int64_t>(p.layer * 2 + kv_sel) * kv.num_kv_heads + kv_head) *
                 kv.block_tokens +
             pos % kv.block_tokens) *
                d;
    }
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        float y1 = x1[j], y2 = x2[j];
        if (is_q || is_k) {
          float s, c;
          sincosf(p.inv_freq[i] * static_cast<float>(pos), &s, &c);
          y1 = x1[j] * c + (-x2[j]) * s;
          y2 = x2[j] * c + x1[j] * s;
        }
        dst[i] = __float2bfloat16(y1);
        dst[i + half] = __float2bfloat16(y2);
      }
    }
  }
}

template <bool kEarly>
__global__ void SiluMulKernel(const bf16* gate_up, int64_t rows, int dim, bf16* out) {
  PdlEnter<kEarly>();
  const int64_t total = rows * dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / dim, i = idx % dim;
    const float g = __bfloat162float(gate_up[r * 2 * dim + i]);
    const float u = __bfloat162float(gate_up[r * 2 * dim + dim + i]);
    out[idx] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
  }
}

__global__ void ArgmaxRowsKernel(const float* logits, int vocab, int32_t* ids) {
  PdlWait();
  PdlLaunchDependents();
  __shared__ float best_val[32];
  __shared__ int best_idx[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float v = -FLT_MAX;
  int idx = 0x7fffffff;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = row[i];
    if (x > v) {  // strided ascending scan: first maximum of this thread wins
      v = x;
      idx = i;
    }
  }
  auto better = [](float av, int ai, float bv, int bi) {
    return av > bv || (av == bv && ai < bi);
  };
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, offset);
    if (better(ov, oi, v, idx)) {
      v = ov;
      idx = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_val[warp] = v;
    best_idx[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    const int n = blockDim.x >> 5;
    v = lane < n ? best_val[lane] : -FLT_MAX;
    idx = lane < n ? best_idx[lane] : 0x7fffffff;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
      const int oi = __shfl_xor_sync(0xffffffffu, idx, offset);
      if (better(ov, oi, v, idx)) {
        v = ov;
        idx = oi;
      }
    }
    if (lane == 0) ids[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
  }
}

__global__ void F32ToBf16Kernel(const float* in, int64_t count, bf16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(in[i]);
  }
}

__global__ void Bf16ToF32Kernel(const bf16* in, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(in[i]);
  }
}

__device__ __forceinline__ float HashUniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
}

template <typename T>
__global__ void FillRandomKernel(T* out, int64_t count, uint64_t seed, float offset,
                                 float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = offset + scale * HashUniform(seed, static_cast<uint64_t>(i));
    if constexpr (sizeof(T) == 2) {
      out[i] = __float2bfloat16(v);
    } else {
      out[i] = v;
    }
  }
}

int GridFor(int64_t count, int threads) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

cudaError_t EmbeddingGather(const int32_t* ids, const bf16* table, int rows, int dim,
                            float* residual, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const cudaError_t err =
      LaunchPdl(EmbeddingGatherKernel, dim3(rows), dim3(kRowThreads), 0, stream, ids, table, dim,
                residual);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

cudaError_t AddRmsNorm(float* residual, const bf16* add, const float* weight,
                       const int32_t* row_map, int rows, int dim, float eps, bf16* out,
                       cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const cudaError_t err =
      LaunchPdl(PdlEarlyTrigger() ? AddRmsNormKernel<true> : AddRmsNormKernel<false>, dim3(rows),
                dim3(kRowThreads), 0, stream, residual, add, weight, row_map, dim, eps, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

cudaError_t QkvPost(const QkvPostParams& params, StepTokens tokens, PagedKv kv,
                    cudaStream_t stream) {
  if (tokens.num_tokens == 0) return cudaSuccess;
  if (kv.head_dim > 256 || kv.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const cudaError_t err =
      LaunchPdl(PdlEarlyTrigger() ? QkvPostKernel<true> : QkvPostKernel<false>,
                dim3(tokens.num_tokens), dim3(kRowThreads), 0, stream, params, tokens, kv);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

cudaError_t SiluMul(const bf16* gate_up, int rows, int dim, bf16* out, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(rows) * dim;
  if (total == 0) return cudaSuccess;
  const cudaError_t err =
      LaunchPdl(PdlEarlyTrigger() ? SiluMulKernel<true> : SiluMulKernel<false>,
                dim3(GridFor(total, 256)), dim3(256), 0, stream, gate_up,
                static_cast<int64_t>(rows), dim, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

cudaError_t ArgmaxRows(const float* logits, int rows, int vocab, int32_t* ids,
                       cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const cudaError_t err =
      LaunchPdl(ArgmaxRowsKernel, dim3(rows), dim3(1024), 0, stream, logits, vocab, ids);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

cudaError_t ConvertF32ToBf16(const float* in, int64_t count, bf16* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  F32ToBf16Kernel<<<GridFor(count, 256), 256, 0, stream>>>(in, count, out);
  return cudaGetLastError();
}

cudaError_t ConvertBf16ToF32(const bf16* in, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  Bf16ToF32Kernel<<<GridFor(count, 256), 256, 0, stream>>>(in, count, out);
  return cudaGetLastError();
}

cudaError_t FillRandomBf16(bf16* out, int64_t count, uint64_t seed, float offset, float scale,
                           cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FillRandomKernel<bf16><<<GridFor(count, 256), 256, 0, stream>>>(out, count, seed, offset,
                                                                  scale);
  return cudaGetLastError();
}

cudaError_t FillRandomF32(float* out, int64_t count, uint64_t seed, float offset, float scale,
                          cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FillRandomKernel<float><<<GridFor(count, 256), 256, 0, stream>>>(out, count, seed, offset,
                                                                   scale);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
