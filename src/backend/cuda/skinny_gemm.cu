// The skinny projection's bf16 entry points and its shared setup (skinny_gemm.h; the kernel
// is in skinny_gemm_kernel.cuh).
#include "backend/cuda/skinny_gemm.h"

#include "backend/cuda/skinny_gemm_kernel.cuh"

namespace kvtier::cuda {

bool SkinnyGemmDeviceOk(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;
  }
  return major == 9 && minor == 0;  // sm_90a code runs on 9.0 only
}

cudaError_t SkinnyGemmInit() {
  for (cudaError_t err : {skinny::OptInAll<skinny::Operands::kBf16, false>(), skinny::OptInAll<skinny::Operands::kBf16, true>(),
                          skinny::Fp8Init(), skinny::W8A8Init()}) {
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

bool SkinnyGemmSupported(int m, int64_t k, int64_t n, const void* x, const void* w) {
  return m >= 1 && m <= kSkinnyGemmMaxRows && k > 0 && k % 16 == 0 && k <= INT32_MAX && n > 0 && n % 8 == 0 &&
         n <= static_cast<int64_t>(skinny::kMaxTiles) * skinny::kBN && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

size_t SkinnyGemmWorkspaceBytes(int max_m, int sm_count) {
  if (max_m < 1 || sm_count < 1) return 0;
  const int mt = max_m <= 16 ? 16 : max_m <= 32 ? 32 : max_m <= 64 ? 64 : 128;
  // Two partial slots (kBN x MT floats) per CTA, one CTA per SM.
  return skinny::kCounterBytes + 2 * static_cast<size_t>(sm_count) * skinny::kBN * mt * sizeof(float);
}

cudaError_t SkinnyGemm(const bf16* x, const bf16* w, int m, int64_t k, int64_t n, void* out, bool out_f32,
                       void* workspace, int sm_count, SkinnyPipeline pipeline, cudaStream_t stream,
                       const CudaLaunchOptions& launch) {
  if (!SkinnyGemmSupported(m, k, n, x, w) || workspace == nullptr || out == nullptr || sm_count < 1) {
    return cudaErrorInvalidValue;
  }
  skinny::Params p{};
  p.x = x;
  p.w = w;
  p.out = out;
  return out_f32 ? skinny::Run<skinny::Operands::kBf16, true>(p, workspace, m, k, n, sm_count, pipeline, stream, launch)
                 : skinny::Run<skinny::Operands::kBf16, false>(p, workspace, m, k, n, sm_count, pipeline, stream, launch);
}

int SkinnyGroupedMaxProblems(int64_t n) {
  if (n < 1 || n > static_cast<int64_t>(skinny::kMaxTiles) * skinny::kBN) return 0;
  return static_cast<int>(skinny::kMaxTiles / ((n + skinny::kBN - 1) / skinny::kBN));
}

cudaError_t SkinnyGemmGrouped(const bf16* x, const bf16* w, const int4* problems, int num_problems, int max_rows,
                              int64_t k, int64_t n, bf16* out, void* workspace, int sm_count, SkinnyPipeline pipeline,
                              cudaStream_t stream, const CudaLaunchOptions& launch) {
  skinny::Params p{};
  if (!SkinnyGemmSupported(max_rows, k, n, x, w) || workspace == nullptr || out == nullptr || sm_count < 1 ||
      !skinny::GroupedParams(x, w, problems, num_problems, n, p)) {
    return cudaErrorInvalidValue;
  }
  p.out = out;
  if (pipeline == SkinnyPipeline::kTma) pipeline = SkinnyPipeline::kOverlapped;
  return skinny::Run<skinny::Operands::kBf16, false>(p, workspace, max_rows, k, n, sm_count, pipeline, stream, launch);
}

}  // namespace kvtier::cuda
