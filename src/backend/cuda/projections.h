// Projections: how each projection of the forward (out = x times a weight matrix's
// transpose) runs on this GPU — which kernel takes a step of a given row count and weight
// type: the CUDA-core GEMVs, the skinny tensor-core kernels (SkinnyGemm, SkinnyFp8), the
// fp8 x fp8 kernels (W8A8) or cuBLAS. Every choice computes the same product; it changes
// only the speed. Enqueues on the compute stream; one thread at a time (the backend's).
#ifndef KVTIER_BACKEND_CUDA_PROJECTIONS_H_
#define KVTIER_BACKEND_CUDA_PROJECTIONS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "absl/status/status.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/kernel_selection.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/workspace.h"
#include "backend/cuda_options.h"

namespace kvtier::cuda {

// Where a step of `rows` tokens runs its projections W8A8 (fp8 weights and activations):
// not at all, on the skinny kernel (decode batches), or on cuBLASLt (Fp8Gemm, larger).
enum class W8A8Path { kNone, kSkinny, kLibrary };

class Projections {
 public:
  using Raw16 = CudaWeights::Raw16;
  using Fp8Matrix = CudaWeights::Fp8Matrix;

  // Reads `weights` and `workspace` at every call (they are filled after this is made).
  Projections(cublasHandle_t cublas, cudaStream_t stream, const CudaLaunchOptions& launch,
              const KernelSelection& kernels, const CudaWeights* weights, const Workspace* workspace);

  // fp8 weights: the cuBLASLt fp8 x fp8 GEMM that runs steps above the skinny sizes.
  void SetFp8Gemm(std::unique_ptr<Fp8Gemm> gemm) { fp8_gemm_ = std::move(gemm); }
  bool has_fp8_gemm() const { return fp8_gemm_ != nullptr; }
  Fp8Gemm* fp8_gemm() const { return fp8_gemm_.get(); }
  int32_t sm_count() const { return sm_count_; }

  // Row-major out (rows, n) = x (rows, k) times w (n, k)^T, in T or fp32 (out_f32).
  // allow_gemv false: always cuBLAS (a weight another kernel just wrote: the GEMV and
  // SkinnyGemm read their first weights before the PDL wait).
  template <typename T>
  absl::Status Gemm(const T* x, const T* w, int rows, int k, int n, void* out, bool out_f32, bool allow_gemv = true);
  // out (rows, n) T = x (rows, k) times a projection: the 16-bit weight w16, or with fp8
  // weights w8 (GemvFp8 for decode rows, the skinny kernels, else dequantized + cuBLAS).
  template <typename T>
  absl::Status Project(const T* x, const Raw16* w16, const Fp8Matrix& w8, int rows, int k, int n, void* out);
  // out (rows, inter) = act(gate) * up of x (rows, h) times the layer's gate|up projection;
  // `wide` (rows, 2 * inter) is scratch for the paths that do not fuse the two.
  template <typename T>
  absl::Status GateUpActivation(const T* x, const CudaWeights::Layer& w, int rows, int h, int inter,
                                GateActivation act, T* wide, T* out);

  W8A8Path W8A8PathFor(int rows) const;
  // out (rows, n) T = the per-token E4M3 activations in the workspace's x8 / x8_scales
  // times the fp8 projection w8, on the tensor cores.
  template <typename T>
  absl::Status ProjectW8A8(W8A8Path path, const Fp8Matrix& w8, int rows, int k, int n, void* out);

 private:
  // Whether a rows x k by n projection (weights w: 16-bit or fp8 codes) runs on SkinnyGemm.
  template <typename T>
  bool UseSkinnyGemm(int rows, int k, int n, const void* x, const void* w, bool fp8) const;
  SkinnyPipeline SkinnyPipelineFor(bool fp8) const;

  const cublasHandle_t cublas_;
  const cudaStream_t stream_;
  const CudaLaunchOptions launch_;
  const int32_t sm_count_;
  const int32_t skinny_mode_;  // KernelSelection::skinny_mode
  const bool skinny_tma_;      // KernelSelection::skinny_tma
  const CudaWeights* const weights_;
  const Workspace* const ws_;
  // fp8 x fp8 projections of steps above kSkinnyGemmMaxRows rows (null: cuBLASLt offers
  // none here; those steps then dequantize into the weights' fp8 scratch).
  std::unique_ptr<Fp8Gemm> fp8_gemm_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_PROJECTIONS_H_
