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

}  // namespace kvtier::cuda
