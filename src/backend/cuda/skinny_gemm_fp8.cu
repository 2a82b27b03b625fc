// The skinny projection's fp8-weight entry point (skinny_gemm.h; the kernel is in
// skinny_gemm_kernel.cuh). A file of its own so its instantiations compile beside the bf16 ones.
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/skinny_gemm_kernel.cuh"

namespace kvtier::cuda {

cudaError_t skinny::Fp8Init() { return OptInAll<Operands::kW8A16, false>(); }

cudaError_t SkinnyGemmFp8(const bf16* x, const uint8_t* codes, const float* scales, int m, int64_t k, int64_t n,
                          bf16* out, void* workspace, int sm_count, SkinnyPipeline pipeline, cudaStream_t stream,
                          const CudaLaunchOptions& launch) {
  if (!SkinnyGemmSupported(m, k, n, x, codes) || scales == nullptr || workspace == nullptr || out == nullptr ||
      sm_count < 1) {
    return cudaErrorInvalidValue;
  }
  skinny::Params p{};
  p.x = x;
  p.w = codes;
  p.scales = scales;
  p.out = out;
  return skinny::Run<skinny::Operands::kW8A16, false>(p, workspace, m, k, n, sm_count, pipeline, stream, launch);
}

cudaError_t SkinnyGemmGroupedFp8(const bf16* x, const uint8_t* codes, const float* scales, const int4* problems,
                                 int num_problems, int max_rows, int64_t k, int64_t n, bf16* out, void* workspace,
                                 int sm_count, SkinnyPipeline pipeline, cudaStream_t stream,
                                 const CudaLaunchOptions& launch) {
  skinny::Params p{};
  if (!SkinnyGemmSupported(max_rows, k, n, x, codes) || scales == nullptr || workspace == nullptr || out == nullptr ||
      sm_count < 1 || !skinny::GroupedParams(x, codes, problems, num_problems, n, p)) {
    return cudaErrorInvalidValue;
  }
  p.scales = scales;
  p.out = out;
  // W8A16 has no TMA pipeline: Dispatch runs kTma as kOverlapped.
  return skinny::Run<skinny::Operands::kW8A16, false>(p, workspace, max_rows, k, n, sm_count, pipeline, stream, launch);
}

}  // namespace kvtier::cuda
