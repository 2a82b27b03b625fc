// Elementwise and row-wise kernels of the forward (semantics in kernels.h). Stateless.
#include <cfloat>
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/elem.cuh"
#include "backend/cuda/gate_activation.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/rms_norm_row.cuh"

namespace kvtier::cuda {
namespace {

constexpr int kRowThreads = kNormRowThreads;

template <typename T>
__global__ void EmbeddingGatherKernel(const int32_t* ids, const T* table, int dim, float scale,
                                      float* residual) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t row = blockIdx.x;
  const T* src = table + static_cast<int64_t>(ids[row]) * dim;
  float* dst = residual + row * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = ToFloat(src[i]) * scale;
}

// EmbeddingGather for dim % 8 == 0 and dim <= 8 * 4 * kRowThreads: the table row (weights,
// at an id from the step metadata) is read before the PDL wait, 16 bytes per load.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    EmbeddingGatherVecKernel(const int32_t* ids, const T* table, int dim, float scale, float* residual) {
  constexpr int J = 4;
  const int64_t row = blockIdx.x;
  const int chunks = dim / 8;
  const uint4* src = reinterpret_cast<const uint4*>(table + static_cast<int64_t>(ids[row]) * dim);
  uint4 v[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kRowThreads;
    if (c < chunks) v[j] = __ldg(src + c);
  }
  PdlWait();
  PdlLaunchDependents();
  float4* dst = reinterpret_cast<float4*>(residual + row * dim);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kRowThreads;
    if (c < chunks) {
      float f[8];
      Unpack8<T>(v[j], f);
      dst[2 * c] = make_float4(f[0] * scale, f[1] * scale, f[2] * scale, f[3] * scale);
      dst[2 * c + 1] = make_float4(f[4] * scale, f[5] * scale, f[6] * scale, f[7] * scale);
    }
  }
}

template <typename T, bool kEarly>
__global__ void AddRmsNormKernel(float* residual, const T* add, const float* weight,
                                 const int32_t* row_map, int dim, float eps, T* out) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  const int64_t s = row_map != nullptr ? row_map[r] : r;
  float* x = residual + s * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = x[i];
    if (add != nullptr) {
      v += ToFloat(add[s * dim + i]);
      x[i] = v;
    }
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  T* o = out + r * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    o[i] = FromFloat<T>(weight[i] * (x[i] * inv_rms));
  }
}

// The same for dim % 8 == 0 and dim <= kRowThreads * 8 * J, the decode hot path
// (rms_norm_row.cuh says how it is fast).
template <typename T, bool kEarly, int J>
__global__ void __launch_bounds__(kRowThreads)
    AddRmsNormVecKernel(float* residual, const T* add, const float* weight,
                        const int32_t* row_map, int dim, float eps, T* out) {
  float y[J][8];
  NormRowInRegisters<T, kEarly, J, kRowThreads>(residual, add, weight, row_map, dim, eps, y);
  uint4* o = reinterpret_cast<uint4*>(out + static_cast<int64_t>(blockIdx.x) * dim);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kRowThreads;
    if (c < dim / 8) o[c] = Pack8<T>(y[j]);
  }
}

// One warp per (token, head) of the fused q|k|v row: grid (tokens, head groups of
// kQkvWarps); lane handles pairs (i, i + half) for i = lane + 32j, so head_dim <= 256. The
// position, the block lookup (step metadata) and the RoPE frequencies are read before the
// PDL wait. (One CTA per token looping over the heads was latency-bound, on the decode
// step's critical path: docs/CUDA_BACKEND.md, "Short kernels and programmatic dependent
// launch".)
template <typename T, bool kEarly, bool kFp8>
__global__ void QkvPostKernel(QkvPostParams<T> p, StepTokens tokens, PagedKv<T> kv) {
  constexpr int kPairsPerLane = 4;
  const int t = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int head = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (p.prefetch.base != nullptr && threadIdx.x == 0) {  // weights: no kernel of the step writes them
    PrefetchShareL2(p.prefetch.base, p.prefetch.bytes, blockIdx.x * gridDim.y + blockIdx.y,
                    static_cast<int64_t>(gridDim.x) * gridDim.y);
  }
  const int d = kv.head_dim, half = d / 2;
  const int total_heads = p.num_heads + 2 * kv.num_kv_heads;
  const int width = total_heads * d;
  const int pos = tokens.pos[t];
  const int chunk = tokens.chunk[t];
  const int32_t block = kv.indices[kv.indptr[chunk] + pos / kv.block_tokens];
  T* block_base = kFp8 ? nullptr : kv.pool + static_cast<int64_t>(block) * kv.block_elements;
  const float* inv_freq =
      p.long_inv_freq != nullptr && pos >= p.long_from_position ? p.long_inv_freq : p.inv_freq;
  float angle[kPairsPerLane];
#pragma unroll
  for (int j = 0; j < kPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    angle[j] = i < half ? inv_freq[i] * static_cast<float>(pos) : 0.0f;
  }
  PdlEnter<kEarly>();
  if (head >= total_heads) return;
  {
    const bool is_q = head < p.num_heads;
    const bool is_k = !is_q && head < p.num_heads + kv.num_kv_heads;
    const T* in = p.qkv + static_cast<int64_t>(t) * width + head * d;
    const float* bias = p.bias != nullptr ? p.bias + head * d : nullptr;
    float x1[kPairsPerLane], x2[kPairsPerLane];
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      x1[j] = x2[j] = 0.0f;
      if (i < half) {
        x1[j] = ToFloat(in[i]);
        x2[j] = ToFloat(in[i + half]);
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
    T* dst = nullptr;
    int64_t kv_row = 0;  // the K/V row's index inside its block (element offset / d)
    if (is_q) {
      dst = p.q_out + (static_cast<int64_t>(t) * p.num_heads + head) * d;
    } else {
      const int kv_sel = is_k ? 0 : 1;
      const int kv_head = head - p.num_heads - kv_sel * kv.num_kv_heads;
      kv_row = (static_cast<int64_t>(p.layer * 2 + kv_sel) * kv.num_kv_heads + kv_head) *
                   kv.block_tokens +
               pos % kv.block_tokens;
      if (!kFp8) dst = block_base + kv_row * d;
    }
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < half && (is_q || is_k)) {
        float s, c;
        sincosf(angle[j], &s, &c);
        c *= p.rope_scale;  // as the CPU's ApplyRope: cos and sin scaled, then rotated
        s *= p.rope_scale;
        const float y1 = x1[j] * c + (-x2[j]) * s;
        const float y2 = x2[j] * c + x1[j] * s;
        x1[j] = y1;
        x2[j] = y2;
      }
    }
    if (kFp8 && !is_q) {
      // The CPU quantizer's rule on the fp32 row (kv_fp8.cuh): same codes, same scale.
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) {
        if (lane + 32 * j < half) amax = fmaxf(amax, fmaxf(fabsf(x1[j]), fabsf(x2[j])));
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
      uint8_t* base = Fp8BlockBase(kv, block);
      uint8_t* codes = base + kv_row * d;
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) {
        const int i = lane + 32 * j;
        if (i < half) {
          const uint32_t pair = Float2ToFp8x2(x1[j] / scale, x2[j] / scale);
          codes[i] = static_cast<uint8_t>(pair & 0xffu);
          codes[i + half] = static_cast<uint8_t>(pair >> 8);
        }
      }
      if (lane == 0) reinterpret_cast<float*>(base + kv.block_elements)[kv_row] = scale;
      return;
    }
#pragma unroll
    for (int j = 0; j < kPairsPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        dst[i] = FromFloat<T>(x1[j]);
        dst[i + half] = FromFloat<T>(x2[j]);
      }
    }
  }
}

template <typename T, GateActivation A, bool kEarly>
__global__ void GatedMulKernel(const T* gate_up, int64_t rows, int dim, T* out) {
  PdlEnter<kEarly>();
  const int64_t total = rows * dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / dim, i = idx % dim;
    const float g = ToFloat(gate_up[r * 2 * dim + i]);
    const float u = ToFloat(gate_up[r * 2 * dim + dim + i]);
    out[idx] = FromFloat<T>(GateTimes<A>(g, u));
  }
}

// GatedMul for dim % 8 == 0: 16-byte loads and stores, 8 outputs per thread.
template <typename T, GateActivation A, bool kEarly>
__global__ void GatedMulVecKernel(const T* gate_up, int64_t rows, int dim, T* out) {
  PdlEnter<kEarly>();
  const int chunks = dim / 8;
  const int64_t total = rows * chunks;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / chunks;
    const int64_t c = idx - r * chunks;
    const uint4* row = reinterpret_cast<const uint4*>(gate_up + r * 2 * dim);
    const uint4 g = row[c], u = row[chunks + c];
    float gf[8], uf[8], y[8];
    Unpack8<T>(g, gf);
    Unpack8<T>(u, uf);
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = GateTimes<A>(gf[k], uf[k]);
    reinterpret_cast<uint4*>(out)[idx] = Pack8<T>(y);
  }
}

// Argmax in two kernels: kArgmaxSplits CTAs per row each scan a slice (every load issued
// before the compares, 16 bytes at a time), then one warp per row merges the slices. One
// CTA per row scanning a 128k vocabulary left most SMs idle on a one-sequence decode step,
// on its critical path.
struct ArgmaxPartial {
  float value;
  int32_t index;
};

__device__ __forceinline__ bool Better(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

__device__ __forceinline__ void WarpArgmax(float& v, int& idx) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, offset);
    if (Better(ov, oi, v, idx)) {
      v = ov;
      idx = oi;
    }
  }
}

constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxLoads = 4;  // float4 loads per thread in flight

__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxPartialKernel(const float* logits, int vocab, ArgmaxPartial* partials) {
  PdlWait();
  PdlLaunchDependents();
  __shared__ float best_val[kArgmaxThreads / 32];
  __shared__ int best_idx[kArgmaxThreads / 32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int per = (vocab + kArgmaxSplits - 1) / kArgmaxSplits;
  const int begin = min(vocab, blockIdx.y * per), end = min(vocab, begin + per);
  float v = -FLT_MAX;
  int idx = 0x7fffffff;
  // Vector loads when the row (vocab % 4) and the slice start (per % 4) are 16-byte
  // aligned; a thread's loads all go out before its compares.
  int i = begin;
  if (vocab % 4 == 0 && per % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row + begin);
    const int n4 = (end - begin) / 4;
    for (int base = 0; base < n4; base += kArgmaxThreads * kArgmaxLoads) {
      float4 f[kArgmaxLoads];
#pragma unroll
      for (int u = 0; u < kArgmaxLoads; ++u) {
        const int q = base + threadIdx.x + u * kArgmaxThreads;
        if (q < n4) f[u] = row4[q];
      }
#pragma unroll
      for (int u = 0; u < kArgmaxLoads; ++u) {
        const int q = base + threadIdx.x + u * kArgmaxThreads;
        if (q < n4) {
          const int at = begin + 4 * q;
          const float e[4] = {f[u].x, f[u].y, f[u].z, f[u].w};
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            if (Better(e[c], at + c, v, idx)) {
              v = e[c];
              idx = at + c;
            }
          }
        }
      }
    }
    i = begin + 4 * n4;
  }
  for (int k = i + threadIdx.x; k < end; k += kArgmaxThreads) {
    const float x = row[k];
    if (Better(x, k, v, idx)) {
      v = x;
      idx = k;
    }
  }
  WarpArgmax(v, idx);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_val[warp] = v;
    best_idx[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < kArgmaxThreads / 32 ? best_val[lane] : -FLT_MAX;
    idx = lane < kArgmaxThreads / 32 ? best_idx[lane] : 0x7fffffff;
    WarpArgmax(v, idx);
    if (lane == 0) partials[blockIdx.x * kArgmaxSplits + blockIdx.y] = {v, idx};
  }
}

__global__ void ArgmaxMergeKernel(const ArgmaxPartial* partials, int32_t* ids) {
  PdlWait();
  PdlLaunchDependents();
  const int lane = threadIdx.x;
  float v = -FLT_MAX;
  int idx = 0x7fffffff;
  for (int k = lane; k < kArgmaxSplits; k += 32) {
    const ArgmaxPartial part = partials[blockIdx.x * kArgmaxSplits + k];
    if (Better(part.value, part.index, v, idx)) {
      v = part.value;
      idx = part.index;
    }
  }
  WarpArgmax(v, idx);
  if (lane == 0) ids[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
}

template <typename T>
__global__ void FromF32Kernel(const float* in, int64_t count, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(in[i]);
  }
}

template <typename T>
__global__ void ToF32Kernel(const T* in, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = ToFloat(in[i]);
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
    if constexpr (std::is_same_v<T, float>) {
      out[i] = v;
    } else {
      out[i] = FromFloat<T>(v);
    }
  }
}

int GridFor(int64_t count, int threads) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

template <typename T>
cudaError_t EmbeddingGather(const int32_t* ids, const T* table, int rows, int dim, float scale,
                            float* residual, cudaStream_t stream,
                            const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  const bool vec = dim % 8 == 0 && dim <= 8 * 4 * kRowThreads &&
                   reinterpret_cast<uintptr_t>(table) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(residual) % 16 == 0;
  const cudaError_t err =
      LaunchPdl(launch, vec ? EmbeddingGatherVecKernel<T> : EmbeddingGatherKernel<T>,
                dim3(rows), dim3(kRowThreads), 0, stream, ids, table, dim, scale, residual);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename T>
cudaError_t AddRmsNorm(float* residual, const T* add, const float* weight,
                       const int32_t* row_map, int rows, int dim, float eps, T* out,
                       cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  const bool early = launch.pdl_early_trigger;
  const bool vec = dim % 8 == 0 && reinterpret_cast<uintptr_t>(residual) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(add) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int chunks_per_thread = (dim / 8 + kRowThreads - 1) / kRowThreads;
  auto kernel = early ? AddRmsNormKernel<T, true> : AddRmsNormKernel<T, false>;
  if (vec && chunks_per_thread <= 1) {
    kernel = early ? AddRmsNormVecKernel<T, true, 1> : AddRmsNormVecKernel<T, false, 1>;
  } else if (vec && chunks_per_thread <= 2) {
    kernel = early ? AddRmsNormVecKernel<T, true, 2> : AddRmsNormVecKernel<T, false, 2>;
  } else if (vec && chunks_per_thread <= 4) {
    kernel = early ? AddRmsNormVecKernel<T, true, 4> : AddRmsNormVecKernel<T, false, 4>;
  }
  const cudaError_t err = LaunchPdl(launch, kernel, dim3(rows), dim3(kRowThreads), 0, stream,
                                    residual, add, weight, row_map, dim, eps, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename T>
cudaError_t QkvPost(const QkvPostParams<T>& params, StepTokens tokens, PagedKv<T> kv,
                    cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (tokens.num_tokens == 0) return cudaSuccess;
  if (kv.head_dim > 256 || kv.head_dim % 2 != 0) return cudaErrorInvalidValue;
  constexpr int kQkvWarps = 4;
  const int total_heads = params.num_heads + 2 * kv.num_kv_heads;
  const dim3 grid(tokens.num_tokens, (total_heads + kQkvWarps - 1) / kQkvWarps);
  if (kv.fp8 && kv.block_bytes < kv.block_elements) return cudaErrorInvalidValue;
  if (!L2PrefetchValid(params.prefetch, static_cast<int64_t>(grid.x) * grid.y)) return cudaErrorInvalidValue;
  auto kernel = launch.pdl_early_trigger
                    ? (kv.fp8 ? QkvPostKernel<T, true, true> : QkvPostKernel<T, true, false>)
                    : (kv.fp8 ? QkvPostKernel<T, false, true> : QkvPostKernel<T, false, false>);
  const cudaError_t err =
      LaunchPdl(launch, kernel, grid, dim3(kQkvWarps * 32), 0, stream, params, tokens, kv);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

bool L2PrefetchValid(const L2Prefetch& prefetch, int64_t ctas) {
  if (prefetch.base == nullptr) return true;
  if (prefetch.bytes <= 0 || prefetch.bytes % 16 != 0 || reinterpret_cast<uintptr_t>(prefetch.base) % 16 != 0 ||
      ctas < 1) {
    return false;
  }
  return (prefetch.bytes / 16 + ctas - 1) / ctas * 16 <= int64_t{UINT32_MAX};
}

namespace {

template <typename T, GateActivation A>
cudaError_t LaunchGatedMul(const T* gate_up, int rows, int dim, T* out, cudaStream_t stream,
                           const CudaLaunchOptions& launch) {
  const int64_t total = static_cast<int64_t>(rows) * dim;
  if (total == 0) return cudaSuccess;
  const bool early = launch.pdl_early_trigger;
  if (dim % 8 == 0 && reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    const cudaError_t err =
        LaunchPdl(launch, early ? GatedMulVecKernel<T, A, true> : GatedMulVecKernel<T, A, false>,
                  dim3(GridFor(total / 8, 256)), dim3(256), 0, stream, gate_up,
                  static_cast<int64_t>(rows), dim, out);
    if (err != cudaSuccess) return err;
    return cudaGetLastError();
  }
  const cudaError_t err =
      LaunchPdl(launch, early ? GatedMulKernel<T, A, true> : GatedMulKernel<T, A, false>,
                dim3(GridFor(total, 256)), dim3(256), 0, stream, gate_up,
                static_cast<int64_t>(rows), dim, out);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t GatedMul(const T* gate_up, int rows, int dim, GateActivation act, T* out, cudaStream_t stream,
                     const CudaLaunchOptions& launch) {
  return act == GateActivation::kGeluTanh ? LaunchGatedMul<T, GateActivation::kGeluTanh>(gate_up, rows, dim, out, stream, launch)
                                          : LaunchGatedMul<T, GateActivation::kSilu>(gate_up, rows, dim, out, stream, launch);
}

size_t ArgmaxScratchBytes(int rows) {
  return static_cast<size_t>(rows) * kArgmaxSplits * sizeof(ArgmaxPartial);
}

cudaError_t ArgmaxRows(const float* logits, int rows, int vocab, void* scratch, int32_t* ids,
                       cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  if (vocab <= 0 || scratch == nullptr || reinterpret_cast<uintptr_t>(logits) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(scratch) % alignof(ArgmaxPartial) != 0) {
    return cudaErrorInvalidValue;
  }
  auto* partials = static_cast<ArgmaxPartial*>(scratch);
  cudaError_t err = LaunchPdl(launch, ArgmaxPartialKernel, dim3(rows, kArgmaxSplits),
                              dim3(kArgmaxThreads), 0, stream, logits, vocab, partials);
  if (err != cudaSuccess) return err;
  err = LaunchPdl(launch, ArgmaxMergeKernel, dim3(rows), dim3(32), 0, stream,
                  static_cast<const ArgmaxPartial*>(partials), ids);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename T>
cudaError_t ConvertFromF32(const float* in, int64_t count, T* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FromF32Kernel<T><<<GridFor(count, 256), 256, 0, stream>>>(in, count, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t ConvertToF32(const T* in, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  ToF32Kernel<T><<<GridFor(count, 256), 256, 0, stream>>>(in, count, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t FillRandom(T* out, int64_t count, uint64_t seed, float offset, float scale,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FillRandomKernel<T><<<GridFor(count, 256), 256, 0, stream>>>(out, count, seed, offset, scale);
  return cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T)                                                                \
  template cudaError_t EmbeddingGather<T>(const int32_t*, const T*, int, int, float, float*, \
                                          cudaStream_t, const CudaLaunchOptions&);           \
  template cudaError_t AddRmsNorm<T>(float*, const T*, const float*, const int32_t*, int, int, \
                                     float, T*, cudaStream_t, const CudaLaunchOptions&);     \
  template cudaError_t QkvPost<T>(const QkvPostParams<T>&, StepTokens, PagedKv<T>,           \
                                  cudaStream_t, const CudaLaunchOptions&);                   \
  template cudaError_t GatedMul<T>(const T*, int, int, GateActivation, T*, cudaStream_t,    \
                                   const CudaLaunchOptions&);                                \
  template cudaError_t ConvertFromF32<T>(const float*, int64_t, T*, cudaStream_t);           \
  template cudaError_t ConvertToF32<T>(const T*, int64_t, float*, cudaStream_t);             \
  template cudaError_t FillRandom<T>(T*, int64_t, uint64_t, float, float, cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE
template cudaError_t FillRandom<float>(float*, int64_t, uint64_t, float, float, cudaStream_t);

}  // namespace kvtier::cuda
