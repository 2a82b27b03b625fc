// The skinny projection's W8A8 entry point (skinny_gemm.h; the kernel is in
// skinny_gemm_kernel.cuh). A file of its own so its instantiations compile beside the others.
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/skinny_gemm_kernel.cuh"

namespace kvtier::cuda {

cudaError_t skinny::W8A8Init() { return OptInAll<Operands::kW8A8, false>(); }

cudaError_t SkinnyGemmW8A8(const uint8_t* x8, const float* x_scales, const uint8_t* codes, const float* scales, int m,
                           int64_t k, int64_t n, bf16* out, void* workspace, int sm_count, SkinnyPipeline pipeline,
                           cudaStream_t stream, const CudaLaunchOptions& launch) {
  if (!SkinnyGemmSupported(m, k, n, x8, codes) || x_scales == nullptr || scales == nullptr || workspace == nullptr ||
      out == nullptr || sm_count < 1) {
    return cudaErrorInvalidValue;
  }
  skinny::Params p{};
  p.x8 = x8;
  p.x_scales = x_scales;
  p.w = codes;
  p.scales = scales;
  p.out = out;
  return skinny::Run<skinny::Operands::kW8A8, false>(p, workspace, m, k, n, sm_count, pipeline, stream, launch);
}

}  // namespace kvtier::cuda
