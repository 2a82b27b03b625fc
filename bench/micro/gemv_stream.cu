// Experiment (session 5, not in the library): a decode GEMV that streams the weights
// through shared memory with bulk asynchronous copies (Hopper's cp.async.bulk + mbarrier),
// meant to beat the warp-per-row GEMV (src/backend/cuda/gemv.cu) on the small projections.
// Semantics as GemvSmallRows (out(rows, n) = x(rows, k) * w(n, k)^T, fp32 accumulation).
//
// The idea: the warp GEMV keeps only 2-4 16-byte loads per lane in flight and each launch
// pays a ramp and a tail (qkv 50 MB and o 34 MB reach 2.2-2.4 TB/s against ~4.2 TB/s). Here
// one CTA per SM owns a contiguous slice of weight rows (a contiguous byte range, w being
// row-major) and keeps kStages x 16 KB of it in flight, issued by a producer warp; the
// first stages go out before the programmatic-dependent-launch wait (weights never depend
// on the kernel before), so they load during that kernel's tail. x is copied to shared
// memory too.
//
// Measured on the H200 (bench/micro/decode_chain.cu; us for one row, weights from HBM,
// warp GEMV in brackets), it lost:
//   v1, 8 warps in lockstep (a CTA barrier per stage), x through L1: qkv 43 (21), gate|up
//       158 (62): ~1.2-1.5 TB/s, and x in shared memory changed nothing;
//   v2 (this file), 8 consumer warps freeing slots on their own + a producer warp:
//       qkv 22.3 (21.3), o 18.7 (15.3), gate|up 64.2 (62.5), down 36.0 (34.2); and the W1
//       chain with it 5.41 ms against 4.23 with the warp GEMV: in a chain its CTAs (one per
//       SM, 100-170 KB of shared memory) do not start early next to the previous kernel's.
// Correct against a double-precision reference (the kernel test that checked it was
// removed with it from the library). What might still make it pay: 2 CTAs per SM with a
// smaller ring, and the shared-memory carveout fixed for the whole chain.
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "gemv_stream.h"
#include "backend/cuda/pdl.h"
#include "launch_env.h"

namespace kvtier::cuda {
namespace {

// Eight consumer warps and one producer warp. The consumers never wait for each other:
// each frees a ring slot on its own (an "empty" barrier per slot), so their shared-memory
// reads, FMA chains and reductions overlap. With a CTA barrier per stage instead, all warps
// moved in lockstep and the kernel ran at 1.1-1.5 TB/s (H200, session 5).
constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;
constexpr int kStageBytes = 16384;
constexpr int kStages = 6;
constexpr int kStageVecs = kStageBytes / 16;
// Each consumer warp takes a 1024-weight segment of every stage: all in one row when
// k % 1024 == 0, so a warp's row changes only between segments. A lane reads 4 vectors.
constexpr int kSegmentElems = kStageBytes / 2 / kConsumerWarps;
constexpr int kSegmentVecs = kSegmentElems / 8;
constexpr int kVecsPerLane = kSegmentVecs / 32;
// Shared memory for the per-row sums, (rows, R) floats: bounds rows per CTA * R.
constexpr int kMaxAccFloats = 4096;
// x in shared memory: R * k bf16 (R = 2 with k = 14336, Llama-3-8B's down projection).
constexpr int kMaxXElems = 32768;
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kBarrierBytes = (2 * kStages + 1) * 8;
constexpr int kMaxSmemBytes = kRingBytes + kMaxXElems * 2 + kBarrierBytes + kMaxAccFloats * 4;

// Layout: ring | x | barriers (full and empty per slot, one for x) | per-row sums.
int SmemBytes(int rows_per_cta, int rows, int k) {
  return kRingBytes + rows * k * 2 + kBarrierBytes + rows_per_cta * rows * 4;
}

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void BarrierInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddress(bar)), "r"(count)
               : "memory");
}

__device__ __forceinline__ void BarrierArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddress(bar)) : "memory");
}

__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void ExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddress(bar)),
               "r"(bytes)
               : "memory");
}

// Arms `bar` for `bytes` and starts the copy that completes them; `policy` is an L2 hint.
__device__ __forceinline__ void BulkLoad(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar, uint64_t policy) {
  ExpectBytes(bar, bytes);
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(SmemAddress(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddress(bar)), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void BulkLoad(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar) {
  ExpectBytes(bar, bytes);
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SmemAddress(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddress(bar))
      : "memory");
}

__device__ __forceinline__ void BarrierWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(SmemAddress(bar)),
      "r"(parity)
      : "memory");
}

template <int R>
__device__ __forceinline__ void Accumulate(const uint4& wv, const uint4 (&xv)[R],
                                           float (&acc)[R]) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wv);
  float wf[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(wp[i]);
    wf[2 * i] = t.x;
    wf[2 * i + 1] = t.y;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xv[r]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(xp[i]);
      acc[r] = fmaf(wf[2 * i], t.x, acc[r]);
      acc[r] = fmaf(wf[2 * i + 1], t.y, acc[r]);
    }
  }
}

// Adds the warp's partial sums of local row `row` into the CTA's accumulators.
template <int R>
__device__ __forceinline__ void Flush(float (&acc)[R], int row, int rows, float* sums) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(&sums[r * rows + row], v);
    acc[r] = 0.0f;
  }
}

template <int R, bool kF32Out>
__global__ void __launch_bounds__(kThreads, 1)
    StreamGemvKernel(const bf16* __restrict__ x, const bf16* __restrict__ w, int k, int n,
                     void* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint4* ring = reinterpret_cast<const uint4*>(smem);
  const uint4* xs = reinterpret_cast<const uint4*>(smem + kRingBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kRingBytes + R * k * 2);
  uint64_t* empty = full + kStages;
  uint64_t* x_ready = empty + kStages;
  float* sums = reinterpret_cast<float*>(x_ready + 1);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool producer = warp == kConsumerWarps;
  const int row0 = static_cast<int>(static_cast<int64_t>(blockIdx.x) * n / gridDim.x);
  const int row1 = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * n / gridDim.x);
  const int rows = row1 - row0;
  const int elems = rows * k;  // <= 2^30 (StreamGemvSupported)
  const int num_stages = (elems + kStageBytes / 2 - 1) / (kStageBytes / 2);
  const bf16* src = w + static_cast<int64_t>(row0) * k;
  uint64_t policy = 0;
  auto issue = [&](int stage) {
    const int slot = stage % kStages;
    const int first = stage * (kStageBytes / 2);
    const int left = (elems - first) * 2;
    BulkLoad(smem + slot * kStageBytes, src + first,
             static_cast<uint32_t>(left < kStageBytes ? left : kStageBytes), &full[slot], policy);
  };

  if (producer && lane == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(&full[s], 1);
      BarrierInit(&empty[s], kConsumerWarps);
    }
    BarrierInit(x_ready, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    policy = EvictFirstPolicy();
    for (int s = 0; s < kStages && s < num_stages; ++s) issue(s);
  }
  for (int i = threadIdx.x; i < rows * R; i += kThreads) sums[i] = 0.0f;
  PdlWait();
  PdlLaunchDependents();
  __syncthreads();  // barriers initialised, sums zeroed

  if (producer) {
    if (lane == 0) {
      BulkLoad(smem + kRingBytes, x, static_cast<uint32_t>(R * k * 2), x_ready);
      for (int stage = kStages; stage < num_stages; ++stage) {
        // Refill the slot once all consumers have released its previous use.
        BarrierWait(&empty[stage % kStages], static_cast<uint32_t>((stage / kStages - 1) & 1));
        issue(stage);
      }
    }
  } else {
    BarrierWait(x_ready, 0);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    int row = 0;
    for (int stage = 0; stage < num_stages; ++stage) {
      const int slot = stage % kStages;
      const int at = stage * (kStageBytes / 2) + warp * kSegmentElems;
      BarrierWait(&full[slot], static_cast<uint32_t>((stage / kStages) & 1));
      if (at < elems) {
        const int seg_row = at / k;
        if (seg_row != row) {
          Flush<R>(acc, row, rows, sums);
          row = seg_row;
        }
        const int col_vec = (at - seg_row * k) / 8 + lane;
        const uint4* seg = ring + slot * kStageVecs + warp * kSegmentVecs + lane;
        uint4 wv[kVecsPerLane];
        uint4 xv[kVecsPerLane][R];
#pragma unroll
        for (int j = 0; j < kVecsPerLane; ++j) {
          wv[j] = seg[32 * j];
#pragma unroll
          for (int r = 0; r < R; ++r) xv[j][r] = xs[r * (k / 8) + col_vec + 32 * j];
        }
        // Independent chains per vector, summed after: shorter FMA dependency chains.
        float part[kVecsPerLane][R];
#pragma unroll
        for (int j = 0; j < kVecsPerLane; ++j) {
#pragma unroll
          for (int r = 0; r < R; ++r) part[j][r] = 0.0f;
          Accumulate<R>(wv[j], xv[j], part[j]);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += (part[0][r] + part[1][r]) + (part[2][r] + part[3][r]);
      }
      __syncwarp();
      if (lane == 0) BarrierArrive(&empty[slot]);
    }
    Flush<R>(acc, row, rows, sums);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * R; i += kThreads) {
    const int r = i / rows, local = i - r * rows;
    const int64_t at = static_cast<int64_t>(r) * n + row0 + local;
    if constexpr (kF32Out) {
      static_cast<float*>(out)[at] = sums[i];
    } else {
      static_cast<bf16*>(out)[at] = __float2bfloat16(sums[i]);
    }
  }
}

template <int R, bool kF32Out>
cudaError_t LaunchOne(const bf16* x, const bf16* w, int k, int n, void* out, int ctas,
                      cudaStream_t stream) {
  static const CudaLaunchOptions launch = LaunchOptionsFromEnv();
  return LaunchPdl(launch, StreamGemvKernel<R, kF32Out>, dim3(ctas), dim3(kThreads),
                   SmemBytes((n + ctas - 1) / ctas, R, k), stream, x, w, k, n, out);
}

template <int R>
cudaError_t Launch(const bf16* x, const bf16* w, int k, int n, void* out, bool out_f32,
                   int ctas, cudaStream_t stream) {
  return out_f32 ? LaunchOne<R, true>(x, w, k, n, out, ctas, stream)
                 : LaunchOne<R, false>(x, w, k, n, out, ctas, stream);
}

template <int R>
cudaError_t AllowSmem() {
  for (auto kernel : {StreamGemvKernel<R, true>, StreamGemvKernel<R, false>}) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmemBytes);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// Shared-memory opt-in for every instantiation and the SM count, once per process (host
// calls only, so also fine inside a graph capture; CudaBackend calls it at creation).
cudaError_t Prepare(int* sms) {
  static cudaError_t status = cudaSuccess;
  static int sm_count = 0;
  static std::once_flag once;
  std::call_once(once, [] {
    int device = 0;
    status = cudaGetDevice(&device);
    if (status == cudaSuccess) {
      status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
    }
    for (cudaError_t err : {AllowSmem<1>(), AllowSmem<2>(), AllowSmem<3>(), AllowSmem<4>(),
                            AllowSmem<5>(), AllowSmem<6>(), AllowSmem<7>(), AllowSmem<8>()}) {
      if (status == cudaSuccess) status = err;
    }
  });
  *sms = sm_count;
  return status;
}

}  // namespace

cudaError_t PrepareStreamGemv() {
  int sms = 0;
  return Prepare(&sms);
}

bool StreamGemvSupported(int rows, int k, int n, const void* x, const void* w) {
  // Segments of 1024 weights never straddle rows; every CTA owns at least one row; its sums
  // fit the shared accumulators (132 CTAs on an H200, 4096 floats each: the LM head of a
  // 128k vocabulary up to R = 4), and x fits beside the ring.
  if (rows < 1 || rows > kGemvMaxRows || k <= 0 || k % kSegmentElems != 0 || n <= 0) return false;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    return false;
  }
  int sms = 0;
  if (Prepare(&sms) != cudaSuccess || sms <= 0) return false;
  const int ctas = std::min(sms, n);
  const int max_rows = (n + ctas - 1) / ctas;
  return static_cast<int64_t>(max_rows) * rows <= kMaxAccFloats &&
         static_cast<int64_t>(rows) * k <= kMaxXElems &&
         static_cast<int64_t>(max_rows) * k <= (int64_t{1} << 30);
}

cudaError_t StreamGemv(const bf16* x, const bf16* w, int rows, int k, int n, void* out,
                       bool out_f32, cudaStream_t stream) {
  if (!StreamGemvSupported(rows, k, n, x, w)) return cudaErrorInvalidValue;
  int sms = 0;
  const cudaError_t prepared = Prepare(&sms);
  if (prepared != cudaSuccess) return prepared;
  const int ctas = std::min(sms, n);
  cudaError_t err;
  switch (rows) {
    case 1: err = Launch<1>(x, w, k, n, out, out_f32, ctas, stream); break;
    case 2: err = Launch<2>(x, w, k, n, out, out_f32, ctas, stream); break;
    case 3: err = Launch<3>(x, w, k, n, out, out_f32, ctas, stream); break;
    case 4: err = Launch<4>(x, w, k, n, out, out_f32, ctas, stream); break;
    case 5: err = Launch<5>(x, w, k, n, out, out_f32, ctas, stream); break;
    case 6: err = Launch<6>(x, w, k, n, out, out_f32, ctas, stream); break;
    case 7: err = Launch<7>(x, w, k, n, out, out_f32, ctas, stream); break;
    default: err = Launch<8>(x, w, k, n, out, out_f32, ctas, stream); break;
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
