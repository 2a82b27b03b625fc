// Fp8Gemm: the fp8 x fp8 tensor-core projection of prefill-sized steps through cuBLASLt:
//   out(rows, n) = (x8(rows, k) * x_scales[row]) * ((w8(n, k) * w_scales[n])^T)
// with E4M3 codes on both sides and one fp32 scale per token and per output channel
// ("outer vector" scaling: cuBLASLt applies both to the fp32 accumulator before rounding
// the 16-bit output), so neither side is dequantized to memory. The activations are
// quantized per token by the kernel that produces them (fp8_activations.h).
//
// Why a library here and not our own kernel: at prefill sizes the product is compute-bound
// and cuBLASLt's fp8 kernels run the tensor cores near their fp8 rate; the decode sizes,
// where the weight stream binds, stay on the skinny kernels (skinny_gemm.h).
// Algorithms are picked by cuBLASLt's heuristic once per (rows, k, n) and cached.
// Thread-safety: one thread at a time (the backend's stepping thread).
#ifndef KVTIER_BACKEND_CUDA_FP8_GEMM_H_
#define KVTIER_BACKEND_CUDA_FP8_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::cuda {

class Fp8Gemm {
 public:
  // workspace: device memory cuBLASLt may use (the caller's, inside its memory limit).
  // Unavailable when cuBLASLt offers no fp8 algorithm with outer-vector scales on this device
  // (checked on a probe shape), so callers keep their other path.
  static absl::StatusOr<std::unique_ptr<Fp8Gemm>> Create(void* workspace, size_t workspace_bytes);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // out_type: CUDA_R_16BF or CUDA_R_16F. k a multiple of 16, every pointer 16-byte aligned
  // (cuBLASLt's fp8 requirements). Aborted naming the shape when cuBLASLt has no algorithm
  // for it or the launch fails.
  absl::Status Run(const uint8_t* x8, const float* x_scales, const uint8_t* w8, const float* w_scales, int rows,
                   int k, int n, void* out, cudaDataType_t out_type, cudaStream_t stream);

  // Run, for row counts that differ from call to call (a MoE expert's routes in a step): the
  // algorithm is cuBLASLt's pick for the power-of-two bucket above `rows` (at least
  // kVaryingRowsMin), so the heuristic runs once per bucket and not per count. A count the
  // bucket's algorithm refuses (cuBLASLt checks before it launches) takes Run's own plan.
  static constexpr int kVaryingRowsMin = 16;
  // Picks RunVaryingRows' algorithms for every bucket up to `max_rows` now (the warm-up), so no
  // step pays for cuBLASLt's heuristic.
  absl::Status PrepareVaryingRows(int max_rows, int k, int n, cudaDataType_t out_type);
  absl::Status RunVaryingRows(const uint8_t* x8, const float* x_scales, const uint8_t* w8, const float* w_scales,
                              int rows, int k, int n, void* out, cudaDataType_t out_type, cudaStream_t stream);

 private:
  struct Plan;
  Fp8Gemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes);
  // `varying`: a bucket's plan, whose B and D layouts RunVaryingRows resizes per call.
  absl::StatusOr<Plan*> PlanFor(int rows, int k, int n, cudaDataType_t out_type, bool varying = false);
  absl::Status Launch(Plan* plan, const uint8_t* x8, const float* x_scales, const uint8_t* w8, const float* w_scales,
                      void* out, cudaStream_t stream);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<std::tuple<int, int, int, int, bool>, std::unique_ptr<Plan>> plans_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FP8_GEMM_H_
