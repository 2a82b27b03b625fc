// Projections (see projections.h): the choice of kernel per projection and row count.
#include "backend/cuda/projections.h"

#include <optional>
#include <type_traits>
#include <utility>

#include "backend/cuda/cublas_type.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/fp8_skinny.h"
#include "backend/cuda/kernels.h"
#include "common/status_macros.h"

namespace kvtier::cuda {
namespace {

// Rows up to which the CUDA-core GEMVs run a projection.
constexpr int kGemvRowsLimit = 2;

}  // namespace

Projections::Projections(cublasHandle_t cublas, cudaStream_t stream, const CudaLaunchOptions& launch,
                         const KernelSelection& kernels, const CudaWeights* weights, const Workspace* workspace)
    : cublas_(cublas),
      stream_(stream),
      launch_(launch),
      sm_count_(kernels.sm_count),
      skinny_mode_(kernels.skinny_mode),
      skinny_tma_(kernels.skinny_tma),
      weights_(weights),
      ws_(workspace) {}

template <typename T>
bool Projections::UseSkinnyGemm(int rows, int k, int n, const void* x, const void* w, bool fp8) const {
  if constexpr (!std::is_same_v<T, bf16>) {
    return false;
  } else {
    // 1-2 rows stay on the GEMVs (weight-stream bound already). Where the per-projection
    // bench (tests/backend_cuda/skinny_gemm_bench.cc) puts each kernel ahead
    // (docs/CUDA_BACKEND.md, "Projections"): with fp8 codes, ahead of SkinnyFp8 above 32 rows
    // and behind below (and SkinnyFp8 stops at 64 rows); with bf16 weights, ahead of cuBLAS or
    // level up to 32 rows, at 33..64 rows ahead only on the largest matrices (the LM head),
    // behind past 64.
    if (skinny_mode_ == 0 || rows <= kGemvRowsLimit || !SkinnyGemmSupported(rows, k, n, x, w)) return false;
    if (skinny_mode_ == 3) return true;  // every projection, TMA pipeline (to measure it)
    if (fp8) return rows > 32;
    return rows <= 32 || (rows <= 64 && static_cast<int64_t>(n) * k >= (int64_t{256} << 20));
  }
}

SkinnyPipeline Projections::SkinnyPipelineFor(bool fp8) const {
  // Mode 1: the faster pipeline per weight type by the same bench and whole W2 steps: bf16
  // serial; fp8 codes TMA where the driver has tensor maps (W8A8: 3% faster W2 steps than
  // overlapped; W8A16 runs it as overlapped, whose conversion runs under the previous
  // slice's MMAs); mode 2: overlapped for both; mode 3: TMA for both.
  if (skinny_mode_ == 3) return SkinnyPipeline::kTma;
  if (skinny_mode_ == 1 && fp8 && skinny_tma_) return SkinnyPipeline::kTma;
  return skinny_mode_ == 2 || fp8 ? SkinnyPipeline::kOverlapped : SkinnyPipeline::kSerial;
}

template <typename T>
absl::Status Projections::Gemm(const T* x, const T* w, int rows, int k, int n, void* out, bool out_f32,
                               bool allow_gemv) {
  // Row-major out(rows, n) = x(rows, k) * w(n, k)^T, i.e. column-major out^T = w^T' * x'.
  // The CUDA-core GEMV beats cuBLAS only up to kGemvRowsLimit rows: beyond that the dot
  // products, not the weight stream, bound it (kvtier_cuda_bench prints both per shape).
  if (allow_gemv && rows <= kGemvRowsLimit && GemvSupported(rows, k, x, w)) {
    CUDA_RETURN_IF_ERROR(GemvSmallRows(x, w, rows, k, n, out, out_f32, stream_, launch_));
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, bf16>) {
    // Decode batches: the weights streamed by every SM alike (allow_gemv false: w was just
    // written by another kernel, and SkinnyGemm reads weights before its PDL wait).
    if (allow_gemv && UseSkinnyGemm<T>(rows, k, n, x, w, /*fp8=*/false)) {
      CUDA_RETURN_IF_ERROR(SkinnyGemm(x, w, rows, k, n, out, out_f32, ws_->skinny, sm_count_,
                                      SkinnyPipelineFor(/*fp8=*/false), stream_, launch_));
      return absl::OkStatus();
    }
  }
  const float alpha = 1.0f, beta = 0.0f;
  constexpr cudaDataType_t type = CublasType<T>();
  CUBLAS_RETURN_IF_ERROR(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, w, type, k, x, type, k,
                                      &beta, out, out_f32 ? CUDA_R_32F : type, n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

template <typename T>
absl::Status Projections::Project(const T* x, const Raw16* w16, const Fp8Matrix& w8, int rows, int k, int n,
                                  void* out) {
  if (!weights_->fp8) return Gemm(x, reinterpret_cast<const T*>(w16), rows, k, n, out, false);
  // The same row limit as the 16-bit GEMV: at more rows the dot products (here also the
  // code conversions), not the weight stream, bound a CUDA-core kernel.
  if (rows <= kGemvRowsLimit && GemvFp8Supported(rows, k, x, w8.codes)) {
    CUDA_RETURN_IF_ERROR(GemvFp8(x, rows, w8.codes, w8.scales, n, k, static_cast<T*>(out), stream_, launch_));
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, bf16>) {
    if (UseSkinnyGemm<T>(rows, k, n, x, w8.codes, /*fp8=*/true)) {  // codes converted in shared memory, wgmma
      CUDA_RETURN_IF_ERROR(SkinnyGemmFp8(x, w8.codes, w8.scales, rows, k, n, static_cast<T*>(out), ws_->skinny,
                                         sm_count_, SkinnyPipelineFor(/*fp8=*/true), stream_, launch_));
      return absl::OkStatus();
    }
  }
  // Decode batches: codes through the tensor cores, K split over CTAs.
  if (rows <= kSkinnyFp8MaxRows && SkinnyFp8Supported(rows, k, x, w8.codes)) {
    CUDA_RETURN_IF_ERROR(SkinnyFp8(x, rows, w8.codes, w8.scales, n, k, SkinnyFp8Splits(n, k, sm_count_),
                                   weights_->fp8_partial, /*gate=*/std::nullopt, static_cast<T*>(out), stream_, launch_));
    return absl::OkStatus();
  }
  // Prefill (W8A16): the projection dequantized to 16 bits, then the tensor cores through cuBLAS.
  T* dense = reinterpret_cast<T*>(weights_->fp8_scratch);
  CUDA_RETURN_IF_ERROR(DequantizeRowsFp8(w8.codes, w8.scales, n, k, dense, stream_));
  return Gemm(x, dense, rows, k, n, out, false, /*allow_gemv=*/false);
}

W8A8Path Projections::W8A8PathFor(int rows) const {
  if (ws_->x8 == nullptr) return W8A8Path::kNone;  // not fp8 weights, or cuda.fp8_activations off
  // Decode batches: the skinny kernel streams the codes (the weights are the traffic), with
  // no conversion of them (W8A8) where W8A16 converts every code in shared memory. Above
  // its rows the products bind and cuBLASLt's fp8 kernels run them faster than its bf16 ones
  // (bench/micro/fp8_lt_gemm.cu). 1-2 rows stay on the GEMV.
  if (rows > kSkinnyGemmMaxRows) return fp8_gemm_ != nullptr ? W8A8Path::kLibrary : W8A8Path::kNone;
  return rows > kGemvRowsLimit && skinny_mode_ != 0 ? W8A8Path::kSkinny : W8A8Path::kNone;
}

template <typename T>
absl::Status Projections::ProjectW8A8(W8A8Path path, const Fp8Matrix& w8, int rows, int k, int n, void* out) {
  if (path == W8A8Path::kLibrary) {
    return fp8_gemm_->Run(ws_->x8, ws_->x8_scales, w8.codes, w8.scales, rows, k, n, out, CublasType<T>(), stream_);
  }
  if constexpr (std::is_same_v<T, bf16>) {  // kSkinny: bf16 compute only (skinny_mode_)
    CUDA_RETURN_IF_ERROR(SkinnyGemmW8A8(ws_->x8, ws_->x8_scales, w8.codes, w8.scales, rows, k, n, static_cast<T*>(out),
                                        ws_->skinny, sm_count_, SkinnyPipelineFor(/*fp8=*/true), stream_, launch_));
    return absl::OkStatus();
  }
  return absl::InternalError("cuda backend: the skinny W8A8 projection runs in bf16 only");
}

template <typename T>
absl::Status Projections::GateUpActivation(const T* x, const CudaWeights::Layer& w, int rows, int h, int inter,
                                           GateActivation act, T* wide, T* out) {
  const bool fp8 = weights_->fp8;
  if (fp8 && rows <= kGemvRowsLimit && GemvFp8Supported(rows, h, x, w.gate_up8.codes)) {
    CUDA_RETURN_IF_ERROR(
        GemvGatedMulFp8(x, rows, w.gate_up8.codes, w.gate_up8.scales, inter, h, act, out, stream_, launch_));
  } else if (fp8 && !UseSkinnyGemm<T>(rows, h, 2 * inter, x, w.gate_up8.codes, /*fp8=*/true) &&
             rows <= kSkinnyFp8MaxRows && SkinnyFp8Supported(rows, h, x, w.gate_up8.codes)) {
    CUDA_RETURN_IF_ERROR(SkinnyFp8(x, rows, w.gate_up8.codes, w.gate_up8.scales, 2 * inter, h,
                                   SkinnyFp8Splits(2 * inter, h, sm_count_), weights_->fp8_partial, act, out, stream_,
                                   launch_));
  } else if (!fp8 && rows <= kGemvRowsLimit && GemvSupported(rows, h, x, w.gate_up)) {
    CUDA_RETURN_IF_ERROR(
        GemvGatedMul(x, reinterpret_cast<const T*>(w.gate_up), rows, h, inter, act, out, stream_, launch_));
  } else {
    RETURN_IF_ERROR(Project(x, w.gate_up, w.gate_up8, rows, h, 2 * inter, wide));
    CUDA_RETURN_IF_ERROR(GatedMul(static_cast<const T*>(wide), rows, inter, act, out, stream_, launch_));
  }
  return absl::OkStatus();
}

#define KVTIER_INSTANTIATE_PROJECTIONS(T)                                                                          \
  template absl::Status Projections::Gemm<T>(const T*, const T*, int, int, int, void*, bool, bool);                \
  template absl::Status Projections::Project<T>(const T*, const Raw16*, const Fp8Matrix&, int, int, int, void*);   \
  template absl::Status Projections::GateUpActivation<T>(const T*, const CudaWeights::Layer&, int, int, int,    \
                                                          GateActivation, T*, T*);                              \
  template absl::Status Projections::ProjectW8A8<T>(W8A8Path, const Fp8Matrix&, int, int, int, void*);
KVTIER_INSTANTIATE_PROJECTIONS(bf16)
KVTIER_INSTANTIATE_PROJECTIONS(f16)
#undef KVTIER_INSTANTIATE_PROJECTIONS

}  // namespace kvtier::cuda
