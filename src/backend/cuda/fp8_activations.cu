// Per-token E4M3 quantization fused into RMSNorm and the gated MLP product (fp8_activations.h).
//
// Rows up to a few thousand (16-byte aligned, the model shapes) are held in registers: one
// pass over memory, every load issued before any use (decode batches are latency-bound:
// rms_norm_row.cuh). Wider or unaligned rows take the generic kernels, which make two passes:
// the first finds the row's largest magnitude, the second recomputes every value and writes
// its code (the row read again from L1/L2).
#include "backend/cuda/fp8_activations.h"

#include <cooperative_groups.h>

#include <initializer_list>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/elem.cuh"
#include "backend/cuda/fp8_codes.cuh"
#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda/rms_norm_row.cuh"
#include "common/fp8_e4m3.h"

namespace kvtier::cuda {
namespace {

constexpr int kThreads = 256;      // generic kernels, and the register-resident norm
constexpr int kWideThreads = 512;  // register-resident gated-product rows (up to 16384 wide)
constexpr int kMaxChunksPerThread = 4;

__device__ __forceinline__ float RowScale(float amax) { return amax > 0.0f ? amax / kFp8E4M3Max : 1.0f; }

// Eight values' codes of e4m3(value / s), the first in the low byte.
__device__ __forceinline__ uint2 Quantize8(const float (&y)[8], float s) {
  uint32_t word[2];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    word[w] = Float2ToFp8x2(y[4 * w] / s, y[4 * w + 1] / s) | (Float2ToFp8x2(y[4 * w + 2] / s, y[4 * w + 3] / s) << 16);
  }
  return make_uint2(word[0], word[1]);
}

// The row held as y[j] (chunks c = threadIdx.x + j * kThreadsPerRow of 8 values, c < chunks)
// quantized: the block's largest magnitude sets the row's scale, 8 codes per 8-byte store.
template <int J, int kThreadsPerRow>
__device__ __forceinline__ void StoreQuantizedRow(const float (&y)[J][8], int chunks, uint8_t* codes, float* scale) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (threadIdx.x + j * kThreadsPerRow < chunks) {
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(y[j][i]));
    }
  }
  const float s = RowScale(BlockMax(amax));
  if (threadIdx.x == 0) *scale = s;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kThreadsPerRow;
    if (c < chunks) {
      reinterpret_cast<uint2*>(codes)[c] = Quantize8(y[j], s);
    }
  }
}

template <typename T, bool kEarly, int J>
__global__ void __launch_bounds__(kThreads)
    AddRmsNormFp8VecKernel(float* residual, const T* add, const float* weight, int dim, float eps, uint8_t* codes,
                           float* scales) {
  float y[J][8];
  NormRowInRegisters<T, kEarly, J, kThreads>(residual, add, weight, nullptr, dim, eps, y);
  StoreQuantizedRow<J, kThreads>(y, dim / 8, codes + static_cast<int64_t>(blockIdx.x) * dim, scales + blockIdx.x);
}

template <typename T, GateActivation A, bool kEarly, int J>
__global__ void __launch_bounds__(kWideThreads) GatedMulFp8VecKernel(const T* gate_up, int dim, uint8_t* codes,
                                                                     float* scales) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  const int chunks = dim / 8;
  const uint4* row = reinterpret_cast<const uint4*>(gate_up + r * 2 * dim);
  uint4 g[J], u[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kWideThreads;
    if (c < chunks) g[j] = row[c], u[j] = row[chunks + c];
  }
  float y[J][8];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (threadIdx.x + j * kWideThreads < chunks) {
      float gf[8], uf[8];
      Unpack8<T>(g[j], gf);
      Unpack8<T>(u[j], uf);
#pragma unroll
      for (int i = 0; i < 8; ++i) y[j][i] = GateTimes<A>(gf[i], uf[i]);
    }
  }
  StoreQuantizedRow<J, kWideThreads>(y, chunks, codes + r * dim, scales + r);
}

// GatedMulFp8VecKernel with row blockIdx.x / kCtas spread over the kCtas CTAs of one thread
// block cluster, each holding its slice of the row in registers (at most kSpreadChunks chunks
// of 8 per thread): the CTAs exchange their slices' largest magnitudes through distributed
// shared memory, so a few rows still keep every SM streaming (one CTA per row leaves most SMs
// idle at decode batch sizes). The row's scale and codes are those of the one-CTA kernel:
// max is exact in any order.
constexpr int kSpreadChunks = 4;

template <typename T, GateActivation A, bool kEarly, int kCtas>
__global__ void __launch_bounds__(kThreads) GatedMulFp8SpreadKernel(const T* gate_up, int dim, uint8_t* codes,
                                                                    float* scales) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ float slice_amax;
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x / kCtas;
  const int rank = static_cast<int>(cluster.block_rank());
  const int chunks = dim / 8;
  const int per_cta = (chunks + kCtas - 1) / kCtas;
  const int begin = rank * per_cta;
  const int end = min(chunks, begin + per_cta);
  const uint4* row = reinterpret_cast<const uint4*>(gate_up + r * 2 * dim);
  uint4 g[kSpreadChunks], u[kSpreadChunks];
#pragma unroll
  for (int j = 0; j < kSpreadChunks; ++j) {
    const int c = begin + threadIdx.x + j * kThreads;
    if (c < end) g[j] = row[c], u[j] = row[chunks + c];
  }
  float y[kSpreadChunks][8];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kSpreadChunks; ++j) {
    if (begin + threadIdx.x + j * kThreads < end) {
      float gf[8], uf[8];
      Unpack8<T>(g[j], gf);
      Unpack8<T>(u[j], uf);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        y[j][i] = GateTimes<A>(gf[i], uf[i]);
        amax = fmaxf(amax, fabsf(y[j][i]));
      }
    }
  }
  const float block_amax = BlockMax(amax);
  if (threadIdx.x == 0) slice_amax = block_amax;
  cluster.sync();
  float row_amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kCtas; ++i) row_amax = fmaxf(row_amax, *cluster.map_shared_rank(&slice_amax, i));
  cluster.barrier_arrive();  // this CTA is done reading its peers
  const float s = RowScale(row_amax);
  if (rank == 0 && threadIdx.x == 0) scales[r] = s;
#pragma unroll
  for (int j = 0; j < kSpreadChunks; ++j) {
    const int c = begin + threadIdx.x + j * kThreads;
    if (c < end) reinterpret_cast<uint2*>(codes + r * dim)[c] = Quantize8(y[j], s);
  }
  cluster.barrier_wait();  // every peer has read this CTA's slice_amax before it exits
}

template <typename T, bool kEarly, int J>
__global__ void __launch_bounds__(kThreads) QuantizeActivationsVecKernel(const T* x, int dim, uint8_t* codes,
                                                                         float* scales) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  const int chunks = dim / 8;
  const uint4* row = reinterpret_cast<const uint4*>(x + r * dim);
  uint4 v[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (c < chunks) v[j] = row[c];
  }
  float y[J][8];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (threadIdx.x + j * kThreads < chunks) Unpack8<T>(v[j], y[j]);
  }
  StoreQuantizedRow<J, kThreads>(y, chunks, codes + r * dim, scales + r);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Chunks of 8 per thread for a register-resident row of `dim` on `threads` threads, 0 when
// the row does not qualify (dim % 8, unaligned pointers, or too wide).
int ChunksPerThread(int dim, int threads, std::initializer_list<const void*> pointers) {
  if (dim % 8 != 0) return 0;
  for (const void* p : pointers) {
    if (!Aligned16(p)) return 0;
  }
  const int per_thread = (dim / 8 + threads - 1) / threads;
  return per_thread <= kMaxChunksPerThread ? per_thread : 0;
}


template <typename T, bool kEarly>
__global__ void __launch_bounds__(kThreads)
    AddRmsNormFp8Kernel(float* residual, const T* add, const float* weight, int dim, float eps, uint8_t* codes,
                        float* scales) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  float* x = residual + r * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    float v = x[i];
    if (add != nullptr) {
      v += ToFloat(add[r * dim + i]);
      x[i] = v;
    }
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) amax = fmaxf(amax, fabsf(weight[i] * (x[i] * inv_rms)));
  const float scale = RowScale(BlockMax(amax));
  if (threadIdx.x == 0) scales[r] = scale;
  uint8_t* out = codes + r * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) out[i] = Float2ToFp8x2(weight[i] * (x[i] * inv_rms) / scale, 0.0f) & 0xffu;
}

template <typename T, GateActivation A>
__device__ __forceinline__ float GatedTimes(const T* row, int dim, int i) {
  return GateTimes<A>(ToFloat(row[i]), ToFloat(row[dim + i]));
}

template <typename T, GateActivation A, bool kEarly>
__global__ void __launch_bounds__(kThreads)
    GatedMulFp8Kernel(const T* gate_up, int dim, uint8_t* codes, float* scales) {
  PdlEnter<kEarly>();
  const int64_t r = blockIdx.x;
  const T* row = gate_up + r * 2 * dim;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) amax = fmaxf(amax, fabsf(GatedTimes<T, A>(row, dim, i)));
  const float scale = RowScale(BlockMax(amax));
  if (threadIdx.x == 0) scales[r] = scale;
  uint8_t* out = codes + r * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) out[i] = Float2ToFp8x2(GatedTimes<T, A>(row, dim, i) / scale, 0.0f) & 0xffu;
}

}  // namespace

template <typename T>
cudaError_t AddRmsNormFp8(float* residual, const T* add, const float* weight, int rows, int dim, float eps,
                          uint8_t* codes, float* scales, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  const bool early = launch.pdl_early_trigger;
  auto kernel = early ? AddRmsNormFp8Kernel<T, true> : AddRmsNormFp8Kernel<T, false>;
  switch (ChunksPerThread(dim, kThreads, {residual, add, weight, codes})) {
    case 1: kernel = early ? AddRmsNormFp8VecKernel<T, true, 1> : AddRmsNormFp8VecKernel<T, false, 1>; break;
    case 2: kernel = early ? AddRmsNormFp8VecKernel<T, true, 2> : AddRmsNormFp8VecKernel<T, false, 2>; break;
    case 3:
    case 4: kernel = early ? AddRmsNormFp8VecKernel<T, true, 4> : AddRmsNormFp8VecKernel<T, false, 4>; break;
    default: break;
  }
  const cudaError_t err = LaunchPdl(launch, kernel, dim3(rows), dim3(kThreads), 0, stream, residual, add, weight, dim,
                                    eps, codes, scales);
  return err != cudaSuccess ? err : cudaGetLastError();
}

namespace {

template <typename T, GateActivation A, int kCtas>
cudaError_t LaunchGatedMulFp8Spread(const T* gate_up, int rows, int dim, uint8_t* codes, float* scales,
                                   cudaStream_t stream, const CudaLaunchOptions& launch) {
  auto kernel = launch.pdl_early_trigger ? GatedMulFp8SpreadKernel<T, A, true, kCtas>
                                         : GatedMulFp8SpreadKernel<T, A, false, kCtas>;
  const cudaError_t err = LaunchPdlInClusters(launch, kCtas, kernel, dim3(rows * kCtas), dim3(kThreads), 0, stream,
                                              gate_up, dim, codes, scales);
  return err != cudaSuccess ? err : cudaGetLastError();
}

// Whether rows of `dim` at these addresses fit the spread kernel on `ctas` CTAs a row.
bool SpreadFits(int dim, int ctas, const void* gate_up, const void* codes) {
  return dim % 8 == 0 && Aligned16(gate_up) && Aligned16(codes) && dim / 8 <= ctas * kThreads * kSpreadChunks;
}

// The CTAs per row GatedMulFp8 spreads a row over: the fewest that give every SM a CTA, where
// the row's slices fit the spread kernel's registers; 1 (the one-CTA kernels, which take any
// row) when the rows alone fill the GPU, or below sm_90 (no clusters). On an H100 at 14336
// wide this picks the fastest spread at every batch size of bench/micro/fp8_activation_rows.cu
// (1-512 rows).
int CtasPerGatedRow(int rows, int dim, const void* gate_up, const void* codes) {
  if (!SpreadFits(dim, 8, gate_up, codes)) return 1;
  int device = 0, sms = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 9) {
    return 1;
  }
  if (rows >= sms) return 1;
  for (const int ctas : {2, 4}) {
    if (static_cast<int64_t>(rows) * ctas >= sms && SpreadFits(dim, ctas, gate_up, codes)) return ctas;
  }
  return 8;
}

template <typename T, GateActivation A>
cudaError_t LaunchGatedMulFp8(const T* gate_up, int rows, int dim, int ctas_per_row, uint8_t* codes, float* scales,
                              cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (ctas_per_row <= 0) ctas_per_row = CtasPerGatedRow(rows, dim, gate_up, codes);
  switch (ctas_per_row) {
    case 2: return LaunchGatedMulFp8Spread<T, A, 2>(gate_up, rows, dim, codes, scales, stream, launch);
    case 4: return LaunchGatedMulFp8Spread<T, A, 4>(gate_up, rows, dim, codes, scales, stream, launch);
    case 8: return LaunchGatedMulFp8Spread<T, A, 8>(gate_up, rows, dim, codes, scales, stream, launch);
    default: break;
  }
  const bool early = launch.pdl_early_trigger;
  auto kernel = early ? GatedMulFp8Kernel<T, A, true> : GatedMulFp8Kernel<T, A, false>;
  const int per_thread = ChunksPerThread(dim, kWideThreads, {gate_up, codes});
  if (per_thread == 1) kernel = early ? GatedMulFp8VecKernel<T, A, true, 1> : GatedMulFp8VecKernel<T, A, false, 1>;
  if (per_thread == 2) kernel = early ? GatedMulFp8VecKernel<T, A, true, 2> : GatedMulFp8VecKernel<T, A, false, 2>;
  if (per_thread >= 3) kernel = early ? GatedMulFp8VecKernel<T, A, true, 4> : GatedMulFp8VecKernel<T, A, false, 4>;
  const int threads = per_thread > 0 ? kWideThreads : kThreads;
  const cudaError_t err =
      LaunchPdl(launch, kernel, dim3(rows), dim3(threads), 0, stream, gate_up, dim, codes, scales);
  return err != cudaSuccess ? err : cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t GatedMulFp8Spread(const T* gate_up, int rows, int dim, GateActivation act, int ctas_per_row,
                              uint8_t* codes, float* scales, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  if (ctas_per_row > 1 && !SpreadFits(dim, ctas_per_row, gate_up, codes)) return cudaErrorInvalidValue;
  return act == GateActivation::kGeluTanh
             ? LaunchGatedMulFp8<T, GateActivation::kGeluTanh>(gate_up, rows, dim, ctas_per_row, codes, scales,
                                                               stream, launch)
             : LaunchGatedMulFp8<T, GateActivation::kSilu>(gate_up, rows, dim, ctas_per_row, codes, scales, stream,
                                                           launch);
}

template <typename T>
cudaError_t GatedMulFp8(const T* gate_up, int rows, int dim, GateActivation act, uint8_t* codes, float* scales,
                        cudaStream_t stream, const CudaLaunchOptions& launch) {
  return GatedMulFp8Spread(gate_up, rows, dim, act, 0, codes, scales, stream, launch);
}

template <typename T>
cudaError_t QuantizeActivationsFp8(const T* x, int rows, int dim, uint8_t* codes, float* scales, cudaStream_t stream,
                                   const CudaLaunchOptions& launch) {
  if (rows == 0) return cudaSuccess;
  const bool early = launch.pdl_early_trigger;
  auto kernel = early ? QuantizeActivationsVecKernel<T, true, 1> : QuantizeActivationsVecKernel<T, false, 1>;
  switch (ChunksPerThread(dim, kThreads, {x, codes})) {
    case 1: break;
    case 2: kernel = early ? QuantizeActivationsVecKernel<T, true, 2> : QuantizeActivationsVecKernel<T, false, 2>; break;
    case 3:
    case 4: kernel = early ? QuantizeActivationsVecKernel<T, true, 4> : QuantizeActivationsVecKernel<T, false, 4>; break;
    default: return QuantizeRowsFp8(x, rows, dim, codes, scales, stream);  // the weights' quantizer: same rule
  }
  const cudaError_t err = LaunchPdl(launch, kernel, dim3(rows), dim3(kThreads), 0, stream, x, dim, codes, scales);
  return err != cudaSuccess ? err : cudaGetLastError();
}

#define KVTIER_INSTANTIATE(T)                                                                                   \
  template cudaError_t AddRmsNormFp8<T>(float*, const T*, const float*, int, int, float, uint8_t*, float*,      \
                                        cudaStream_t, const CudaLaunchOptions&);                                \
  template cudaError_t GatedMulFp8<T>(const T*, int, int, GateActivation, uint8_t*, float*, cudaStream_t,         \
                                      const CudaLaunchOptions&);                                                \
  template cudaError_t GatedMulFp8Spread<T>(const T*, int, int, GateActivation, int, uint8_t*, float*,           \
                                            cudaStream_t, const CudaLaunchOptions&);                            \
  template cudaError_t QuantizeActivationsFp8<T>(const T*, int, int, uint8_t*, float*, cudaStream_t,               \
                                                 const CudaLaunchOptions&);
KVTIER_INSTANTIATE(bf16)
KVTIER_INSTANTIATE(f16)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
