// Paged causal attention over a ragged step (decode and prefill alike), split-K with a merge
// pass (semantics in kernels.h). One CTA = one AttentionItem x one kv head; its 4 warps
// stride over the item's KV positions, each lane holding E consecutive elements of a
// head_dim row, and keep an online softmax per query row (log2 domain). A soft-cap and a
// sliding window (AttentionScores) are applied per score; a window also starts the item's
// walk at the first key its earliest query can read. Stateless.
#include <cmath>
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/kernels.h"

namespace kvtier::cuda {
namespace {

constexpr int kWarps = 4;

// Elements of a head_dim row per lane: the power of two >= head_dim / 32.
int LaneElements(int head_dim) {
  int e = 1;
  while (e * 32 < head_dim) e *= 2;
  return e;
}

template <typename T, int E>
__device__ __forceinline__ void LoadRow(const T* p, bool on, float (&out)[E]) {
  if (!on) {
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = 0.0f;
    return;
  }
  if constexpr (E == 8) {
    Unpack8<T>(*reinterpret_cast<const uint4*>(p), out);
  } else if constexpr (E == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 lo = UnpackFloat2<T>(raw.x), hi = UnpackFloat2<T>(raw.y);
    out[0] = lo.x, out[1] = lo.y, out[2] = hi.x, out[3] = hi.y;
  } else if constexpr (E == 2) {
    const float2 f = UnpackFloat2<T>(*reinterpret_cast<const uint32_t*>(p));
    out[0] = f.x;
    out[1] = f.y;
  } else {
    out[0] = ToFloat(p[0]);
  }
}

template <typename T, int E, int kRows>
__global__ void __launch_bounds__(kWarps * 32)
    PagedAttentionKernel(AttentionParams<T> p, StepTokens tok, PagedKv<T> kv, AttentionSplits sp,
                         float scale_log2, float softcap_log2, int window) {
  extern __shared__ float smem[];  // (kWarps, kRows, head_dim + 2): acc | m | l
  const AttentionItem item = p.items[blockIdx.x];
  const int kv_head = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int d = kv.head_dim;
  const int group = p.num_heads / kv.num_kv_heads;
  const int rows = item.num_tokens * item.group_count;
  const bool lane_on = lane * E < d;

  float q[kRows][E];
  int qpos[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    qpos[r] = -1;
#pragma unroll
    for (int e = 0; e < E; ++e) q[r][e] = 0.0f;
    if (r < rows) {
      const int t = item.token_begin + r / item.group_count;
      const int h = kv_head * group + item.group_begin + r % item.group_count;
      qpos[r] = tok.pos[t];
      LoadRow<T, E>(p.q + (static_cast<int64_t>(t) * p.num_heads + h) * d + lane * E, lane_on,
                 q[r]);
#pragma unroll
      for (int e = 0; e < E; ++e) q[r][e] *= scale_log2;
    }
  }

  float m[kRows], l[kRows], acc[kRows][E];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[r][e] = 0.0f;
  }

  const int32_t* table = kv.indices + kv.indptr[item.chunk];
  const int64_t head_offset =
      (static_cast<int64_t>(p.layer) * 2 * kv.num_kv_heads + kv_head) * kv.block_tokens * d;
  const int64_t v_offset = static_cast<int64_t>(kv.num_kv_heads) * kv.block_tokens * d;
  // The item's tokens are consecutive positions: the first one reads the oldest key.
  const int first_key = max(item.kv_begin, tok.pos[item.token_begin] - window + 1);
  for (int pos = first_key + warp; pos < item.kv_end; pos += kWarps) {
    const int32_t block = table[pos / kv.block_tokens];
    const T* kp = kv.pool + static_cast<int64_t>(block) * kv.block_elements + head_offset +
                     (pos % kv.block_tokens) * d + lane * E;
    float k[E], v[E];
    LoadRow<T, E>(kp, lane_on, k);
    LoadRow<T, E>(kp + v_offset, lane_on, v);
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s[r] = 0.0f;
      if (r < rows) {
#pragma unroll
        for (int e = 0; e < E; ++e) s[r] = fmaf(q[r][e], k[e], s[r]);
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < rows) s[r] += __shfl_xor_sync(0xffffffffu, s[r], offset);
      }
    }
    if (softcap_log2 > 0.0f) {  // cap * tanh(s / cap), in the log2 domain the scores are in
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] = softcap_log2 * tanhf(s[r] / softcap_log2);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < rows && pos <= qpos[r] && qpos[r] - pos < window) {
        const float m_new = fmaxf(m[r], s[r]);
        const float correction = exp2f(m[r] - m_new);
        const float weight = exp2f(s[r] - m_new);
        l[r] = l[r] * correction + weight;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] = fmaf(acc[r][e], correction, weight * v[e]);
        m[r] = m_new;
      }
    }
  }

  const int stride = d + 2;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < rows) {
      float* dst = smem + (warp * kRows + r) * stride;
      if (lane_on) {
#pragma unroll
        for (int e = 0; e < E; ++e) dst[lane * E + e] = acc[r][e];
      }
      if (lane == 0) {
        dst[d] = m[r];
        dst[d + 1] = l[r];
      }
    }
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < rows * d; idx += blockDim.x) {
    const int r = idx / d, i = idx % d;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_max = fmaxf(m_max, smem[(w * kRows + r) * stride + d]);
    float out_sum = 0.0f, l_sum = 0.0f;
    if (m_max != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float* src = smem + (w * kRows + r) * stride;
        if (src[d] == -INFINITY) continue;
        const float c = exp2f(src[d] - m_max);
        out_sum += src[i] * c;
        l_sum += src[d + 1] * c;
      }
    }
    const int t = item.token_begin + r / item.group_count;
    const int h = kv_head * group + item.group_begin + r % item.group_count;
    if (sp.num_splits[t] > 1) {
      const int64_t slot = sp.partial_base[t] + item.split;
      sp.partial_out[(slot * p.num_heads + h) * d + i] = out_sum;
      if (i == 0) {
        sp.partial_ml[(slot * p.num_heads + h) * 2] = m_max;
        sp.partial_ml[(slot * p.num_heads + h) * 2 + 1] = l_sum;
      }
    } else {
      p.out[(static_cast<int64_t>(t) * p.num_heads + h) * d + i] =
          FromFloat<T>(out_sum / l_sum);
    }
  }
}

// One CTA per (token, head) with more than one split: the log-sum-exp merge of partials.
template <typename T>
__global__ void MergeSplitsKernel(AttentionSplits sp, int num_heads, int head_dim, T* out) {
  const int t = blockIdx.x, h = blockIdx.y;
  const int n = sp.num_splits[t];
  if (n <= 1) return;
  const int64_t base = sp.partial_base[t];
  float m_max = -INFINITY;
  for (int s = 0; s < n; ++s) m_max = fmaxf(m_max, sp.partial_ml[((base + s) * num_heads + h) * 2]);
  float l_sum = 0.0f;
  for (int s = 0; s < n; ++s) {
    const float ms = sp.partial_ml[((base + s) * num_heads + h) * 2];
    if (ms != -INFINITY) l_sum += sp.partial_ml[((base + s) * num_heads + h) * 2 + 1] * exp2f(ms - m_max);
  }
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < n; ++s) {
      const float ms = sp.partial_ml[((base + s) * num_heads + h) * 2];
      if (ms == -INFINITY) continue;
      o += sp.partial_out[((base + s) * num_heads + h) * head_dim + i] * exp2f(ms - m_max);
    }
    out[(static_cast<int64_t>(t) * num_heads + h) * head_dim + i] = FromFloat<T>(o / l_sum);
  }
}

template <typename T, int E, int kRows>
cudaError_t LaunchRows(const AttentionParams<T>& p, StepTokens tok, PagedKv<T> kv,
                       AttentionSplits sp, cudaStream_t stream) {
  const size_t smem = sizeof(float) * kWarps * kRows * (kv.head_dim + 2);
  auto kernel = PagedAttentionKernel<T, E, kRows>;
  if (smem > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const AttentionScores& scores = p.scores;
  const double scale = scores.scale > 0.0f ? scores.scale : 1.0 / std::sqrt(static_cast<double>(kv.head_dim));
  const float scale_log2 = static_cast<float>(scale * M_LOG2E);
  const float softcap_log2 = static_cast<float>(scores.logit_softcap * M_LOG2E);  // 0: none
  const int window = scores.window > 0 ? scores.window : INT32_MAX;
  dim3 grid(p.num_items, kv.num_kv_heads);
  kernel<<<grid, kWarps * 32, smem, stream>>>(p, tok, kv, sp, scale_log2, softcap_log2, window);
  return cudaGetLastError();
}

template <typename T, int E>
cudaError_t LaunchE(int max_rows, const AttentionParams<T>& p, StepTokens tok, PagedKv<T> kv,
                    AttentionSplits sp, cudaStream_t stream) {
  if (max_rows <= 1) return LaunchRows<T, E, 1>(p, tok, kv, sp, stream);
  if (max_rows <= 2) return LaunchRows<T, E, 2>(p, tok, kv, sp, stream);
  if (max_rows <= 4) return LaunchRows<T, E, 4>(p, tok, kv, sp, stream);
  if (max_rows <= 8) return LaunchRows<T, E, 8>(p, tok, kv, sp, stream);
  if constexpr (E < 8) {
    if (max_rows <= 16) return LaunchRows<T, E, 16>(p, tok, kv, sp, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int AttentionMaxRows(int head_dim) { return LaneElements(head_dim) >= 8 ? 8 : 16; }

bool AttentionSupportsHeadDim(int head_dim) {
  if (head_dim <= 0 || head_dim > 256 || head_dim % 2 != 0) return false;
  return head_dim % LaneElements(head_dim) == 0;
}

// max_rows of the launch is carried in the items: the largest num_tokens * group_count.
template <typename T>
cudaError_t PagedAttention(const AttentionParams<T>& params, StepTokens tokens, PagedKv<T> kv,
                           AttentionSplits splits, cudaStream_t stream) {
  if (kv.fp8) return cudaErrorInvalidValue;  // fp8 KV runs on Decode/PrefillAttention only
  if (params.num_items == 0) return cudaSuccess;
  if (params.scores.scale < 0.0f || params.scores.logit_softcap < 0.0f || params.scores.window < 0) {
    return cudaErrorInvalidValue;
  }
  if (!AttentionSupportsHeadDim(kv.head_dim)) return cudaErrorInvalidValue;
  const int max_rows = params.max_rows;
  cudaError_t err;
  switch (LaneElements(kv.head_dim)) {
    case 1: err = LaunchE<T, 1>(max_rows, params, tokens, kv, splits, stream); break;
    case 2: err = LaunchE<T, 2>(max_rows, params, tokens, kv, splits, stream); break;
    case 4: err = LaunchE<T, 4>(max_rows, params, tokens, kv, splits, stream); break;
    case 8: err = LaunchE<T, 8>(max_rows, params, tokens, kv, splits, stream); break;
    default: return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess || !params.any_split) return err;
  dim3 grid(tokens.num_tokens, params.num_heads);
  MergeSplitsKernel<T><<<grid, 128, 0, stream>>>(splits, params.num_heads, kv.head_dim,
                                              params.out);
  return cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T)                                                            \
  template cudaError_t PagedAttention<T>(const AttentionParams<T>&, StepTokens, PagedKv<T>, \
                                         AttentionSplits, cudaStream_t);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
