// What the cuDNN probes (cudnn_sdpa.cu, cudnn_sdpa_fp8.cu) share: the library's table of cuDNN
// functions filled with the ones the probe links (it calls the library's graph builder,
// src/backend/cuda/cudnn_graph.h), cuDNN's last error message, random bf16 data and the fp32
// reference attention they check against. CUDA source: for .cu files.
#ifndef KVTIER_BENCH_MICRO_CUDNN_PROBE_CUH_
#define KVTIER_BENCH_MICRO_CUDNN_PROBE_CUH_

#include <cuda_bf16.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>

#include <string>

#include "backend/cuda/cudnn_api.h"
#include "backend/cuda/cudnn_graph.h"

namespace kvtier::probe {

inline const kvtier::cuda::CudnnApi& Api() {
  static const kvtier::cuda::CudnnApi api = [] {
    kvtier::cuda::CudnnApi a;
    a.GetVersion = &cudnnGetVersion;
    a.GetErrorString = &cudnnGetErrorString;
    a.GetLastErrorString = &cudnnGetLastErrorString;
    a.Create = &cudnnCreate;
    a.Destroy = &cudnnDestroy;
    a.SetStream = &cudnnSetStream;
    a.BackendCreateDescriptor = &cudnnBackendCreateDescriptor;
    a.BackendDestroyDescriptor = &cudnnBackendDestroyDescriptor;
    a.BackendSetAttribute = &cudnnBackendSetAttribute;
    a.BackendGetAttribute = &cudnnBackendGetAttribute;
    a.BackendFinalize = &cudnnBackendFinalize;
    a.BackendExecute = &cudnnBackendExecute;
    return a;
  }();
  return api;
}

inline std::string LastCudnnError() {
  char message[2048] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  return message;
}

__global__ void FillRandom(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65535.0f - 0.5f) * 2.0f);
  }
}

// out[r, h, :] = causal (bottom-right when `causal`) softmax attention in fp32.
__global__ void ReferenceAttention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   float* out, kvtier::cuda::AttentionGraphShape s, float scale, bool causal, bool top_left) {
  const int64_t r = blockIdx.x, h = threadIdx.x;
  if (h >= s.hq) return;
  const int64_t kvh = h / (s.hq / s.hk);
  const int64_t last = !causal ? s.skv - 1 : top_left ? r : r + (s.skv - s.sq);
  const __nv_bfloat16* qr = q + (r * s.hq + h) * s.d;
  float m = -INFINITY, l = 0.0f;
  float acc[128] = {0};
  for (int64_t j = 0; j <= last; ++j) {
    const __nv_bfloat16* kr = k + (j * s.hk + kvh) * s.d;
    float dot = 0.0f;
    for (int64_t i = 0; i < s.d; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    dot *= scale;
    const float m_new = fmaxf(m, dot), correction = expf(m - m_new), p = expf(dot - m_new);
    l = l * correction + p;
    const __nv_bfloat16* vr = v + (j * s.hk + kvh) * s.d;
    for (int64_t i = 0; i < s.d; ++i) acc[i] = acc[i] * correction + p * __bfloat162float(vr[i]);
    m = m_new;
  }
  for (int64_t i = 0; i < s.d; ++i) out[(r * s.hq + h) * s.d + i] = acc[i] / l;
}

}  // namespace kvtier::probe

#endif  // KVTIER_BENCH_MICRO_CUDNN_PROBE_CUH_
