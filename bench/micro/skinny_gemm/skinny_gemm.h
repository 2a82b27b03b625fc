// Skinny tensor-core GEMM for decode batches: out(m, n) = x(m, k) * w(n, k)^T with
// 1 <= m <= kSkinnyGemmMaxRows, bf16 operands, fp32 accumulation, bf16 or fp32 output.
// At these m the weights (n * k * 2 bytes, read once) are nearly all the traffic, so the
// kernel is built to stream them at HBM bandwidth (design and measurements in
// skinny_gemm.cu). Built for sm_90a (wgmma) only: on another GPU SkinnyGemm returns an error
// (no kernel image) and the caller should keep its cuBLAS path.
#ifndef KVTIER_BACKEND_CUDA_SKINNY_GEMM_H_
#define KVTIER_BACKEND_CUDA_SKINNY_GEMM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace kvtier::cuda {

using bf16 = __nv_bfloat16;

constexpr int kSkinnyGemmMaxRows = 128;

// 1 <= m <= 128, k and n positive multiples of 8. (x and w must also be 16-byte aligned.)
bool SkinnyGemmSupported(int m, int k, int n);

// Bytes of workspace SkinnyGemm needs for any m <= max_m, n <= max_n on the current device
// (split-K partial sums and per-tile arrival counters). The caller allocates it once and
// must zero it once (cudaMemset) before the first use; every SkinnyGemm leaves the
// counters zero again, so no per-call clearing is needed and calls can be graph-captured.
// Calls sharing one workspace must be ordered on one stream (they are, in a decode step).
size_t SkinnyGemmWorkspaceBytes(int max_m, int max_n);

// Requires m <= the max_m and n <= the max_n the workspace was sized for. Launches (with
// programmatic dependent launch) on `stream`. Reads x only after PdlWait,
// so it may follow the kernel producing x. cudaErrorInvalidValue when !SkinnyGemmSupported
// or x/w are misaligned or workspace is null.
cudaError_t SkinnyGemm(const bf16* x, const bf16* w, int m, int k, int n, void* out,
                       bool out_f32, void* workspace, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_SKINNY_GEMM_H_
