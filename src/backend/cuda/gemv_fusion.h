// GemvFusion: what a decode GEMV (1-2 activation rows) does around its product, so that the
// RMSNorm before a projection and the residual add after one need no kernel of their own.
//
// The idea: a one-row decode step is a chain of dependent kernels, and each short kernel
// between two projections (the norm) is a kernel boundary and a memory round trip on the
// critical path. Each CTA of the GEMV norms the residual rows itself into shared memory, and
// the projections whose output goes into the residual (o and down) add it there themselves.
// The norm is NormRowLoaded (rms_norm_row.cuh) with AddRmsNorm's block shape, so the fused and
// the separate kernels compute the same bits. Off by default (kDecodeNormFusionByDefault): with
// one output per warp, every one of the GEMV's many CTAs repeats the norm (a residual row and
// its weights, 32 KB at 4096 wide, and a block-wide sum before the first product), which costs
// more than the norm kernel it removes.
#ifndef KVTIER_BACKEND_CUDA_GEMV_FUSION_H_
#define KVTIER_BACKEND_CUDA_GEMV_FUSION_H_

#include <cstdint>

namespace kvtier::cuda {

enum class GemvEnd {
  kPlain,        // out = x times w^T
  kNormIn,       // x = RMSNorm(residual) * norm_weight, computed in the kernel
  kResidualOut,  // residual += T(x times w^T), no other output
};

struct GemvFusion {
  // Set: kNormIn. The input rows are the fp32 residual rows (rows, k), normed with these
  // weights (k floats) and eps; x is not read. The residual is not written.
  const float* norm_weight = nullptr;
  float norm_eps = 0.0f;
  // The fp32 residual rows: what kNormIn norms (rows, k), or, without norm_weight
  // (kResidualOut), what the output (rows, n), rounded to the compute dtype, is added into.
  float* residual = nullptr;

  GemvEnd end() const {
    if (norm_weight != nullptr) return GemvEnd::kNormIn;
    return residual != nullptr ? GemvEnd::kResidualOut : GemvEnd::kPlain;
  }
};

// Whether one-row and two-row decode steps fuse their norms where CudaLaunchOptions::
// decode_norm_fusion leaves the choice to the library: no. Whole steps measured no faster
// (docs/CUDA_BACKEND.md, "What bounds a decode step"): every CTA repeating the norm costs more
// than the kernel boundary it saves.
constexpr bool kDecodeNormFusionByDefault = false;

// The widest input a kNormIn GEMV norms (the norm's block shape: 256 threads x 2 chunks of 8)
// and the shared memory it takes for it: the normed rows in the compute dtype.
constexpr int kGemvNormMaxK = 4096;
inline int GemvNormSharedBytes(int rows, int k) { return rows * k * 2; }

// Whether a GEMV of `rows` rows over k inputs can fuse `end` (the GEMV's own limits aside).
inline bool GemvFusionSupported(GemvEnd end, int rows, int k) {
  if (end == GemvEnd::kPlain) return true;
  if (rows < 1 || rows > 2) return false;
  return end != GemvEnd::kNormIn || (k % 8 == 0 && k <= kGemvNormMaxK);
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_GEMV_FUSION_H_
