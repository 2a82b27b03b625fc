// The 16-bit decode GEMVs (semantics in kernels.h): gemv_kernel.cuh's kernel over weights in
// the compute dtype, with the pre-wait depth CudaLaunchOptions::gemv_prefetch chooses, or
// gemv_bulk.cuh's where the matrix fits in shared memory.
#include <cstdint>

#include "backend/cuda/elem.cuh"
#include "backend/cuda/gemv_bulk.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.h"

namespace kvtier::cuda {
namespace {

// 16-byte pieces per lane loaded before the PDL wait (kPre): CudaLaunchOptions::
// gemv_prefetch rounded down to an instantiated 2, 4 or 8. More pieces keep more of the
// weight stream going while the previous kernel finishes, but at 8 the kernel needs so many
// registers that fewer CTAs fit on an SM and the stream stalls, while 2 leaves more of the
// previous kernel's time unused: hence the default 4 (docs/CUDA_BACKEND.md, "Projections").
int GemvPrefetchPieces(const CudaLaunchOptions& launch) {
  const int requested = launch.gemv_prefetch;
  return requested >= 8 ? 8 : requested >= 4 ? 4 : 2;
}

// out (R, n) of 16-bit weights w (W * n, k): plain (W = 1) or gate|up with activation A (W = 2).
template <typename T, int R, int W, bool kF32Out, GateActivation A = GateActivation::kSilu>
cudaError_t LaunchGemv16(const T* x, const T* w, int k, int n, void* out, cudaStream_t stream,
                         const CudaLaunchOptions& launch) {
  const float* no_scales = nullptr;
  switch (GemvPrefetchPieces(launch)) {
    case 8:
      return gemv::LaunchDecodeGemv<gemv::Weights16<T>, T, R, W, kF32Out, 8, A>(x, w, no_scales, k, n, out, stream, launch);
    case 4:
      return gemv::LaunchDecodeGemv<gemv::Weights16<T>, T, R, W, kF32Out, 4, A>(x, w, no_scales, k, n, out, stream, launch);
    default:
      return gemv::LaunchDecodeGemv<gemv::Weights16<T>, T, R, W, kF32Out, 2, A>(x, w, no_scales, k, n, out, stream, launch);
  }
}

template <typename T, int R>
cudaError_t LaunchGemv(const T* x, const T* w, int k, int n, void* out, bool out_f32,
                       cudaStream_t stream, const CudaLaunchOptions& launch) {
  return out_f32 ? LaunchGemv16<T, R, 1, true>(x, w, k, n, out, stream, launch)
                 : LaunchGemv16<T, R, 1, false>(x, w, k, n, out, stream, launch);
}

template <typename T, int R>
cudaError_t LaunchGemvGated(const T* x, const T* w_gate_up, int k, int inter, GateActivation act, T* out,
                            cudaStream_t stream, const CudaLaunchOptions& launch) {
  return act == GateActivation::kGeluTanh
             ? LaunchGemv16<T, R, 2, false, GateActivation::kGeluTanh>(x, w_gate_up, k, inter, out, stream, launch)
             : LaunchGemv16<T, R, 2, false, GateActivation::kSilu>(x, w_gate_up, k, inter, out, stream, launch);
}

}  // namespace

template <typename T>
cudaError_t GemvGatedMul(const T* x, const T* w_gate_up, int rows, int k, int inter, GateActivation act, T* out,
                         cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (rows < 1 || rows > 2 || !GemvSupported(rows, k, x, w_gate_up)) return cudaErrorInvalidValue;
  return rows == 1 ? LaunchGemvGated<T, 1>(x, w_gate_up, k, inter, act, out, stream, launch)
                   : LaunchGemvGated<T, 2>(x, w_gate_up, k, inter, act, out, stream, launch);
}

bool GemvSupported(int rows, int k, const void* x, const void* w) {
  return rows >= 1 && rows <= kGemvMaxRows && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

template <typename T>
cudaError_t GemvSmallRows(const T* x, const T* w, int rows, int k, int n, void* out,
                          bool out_f32, cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (!GemvSupported(rows, k, x, w)) return cudaErrorInvalidValue;
  switch (rows) {
    case 1: return LaunchGemv<T, 1>(x, w, k, n, out, out_f32, stream, launch);
    case 2: return LaunchGemv<T, 2>(x, w, k, n, out, out_f32, stream, launch);
    case 3: return LaunchGemv<T, 3>(x, w, k, n, out, out_f32, stream, launch);
    case 4: return LaunchGemv<T, 4>(x, w, k, n, out, out_f32, stream, launch);
    case 5: return LaunchGemv<T, 5>(x, w, k, n, out, out_f32, stream, launch);
    case 6: return LaunchGemv<T, 6>(x, w, k, n, out, out_f32, stream, launch);
    case 7: return LaunchGemv<T, 7>(x, w, k, n, out, out_f32, stream, launch);
    default: return LaunchGemv<T, 8>(x, w, k, n, out, out_f32, stream, launch);
  }
}

#define KVTIER_INSTANTIATE(T)                                                               \
  template cudaError_t GemvGatedMul<T>(const T*, const T*, int, int, int, GateActivation, T*, \
                                       cudaStream_t, const CudaLaunchOptions&);              \
  template cudaError_t GemvSmallRows<T>(const T*, const T*, int, int, int, void*, bool,    \
                                        cudaStream_t, const CudaLaunchOptions&);
KVTIER_CUDA_INSTANTIATE_ELEM(KVTIER_INSTANTIATE)
#undef KVTIER_INSTANTIATE

}  // namespace kvtier::cuda
