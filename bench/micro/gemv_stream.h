// The bulk-copy GEMV experiment (gemv_stream.cu says what it is and how it measured).
#ifndef KVTIER_BENCH_MICRO_GEMV_STREAM_H_
#define KVTIER_BENCH_MICRO_GEMV_STREAM_H_

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

// One-time setup (shared-memory opt-in); call before any graph capture.
cudaError_t PrepareStreamGemv();
// 1 <= rows <= kGemvMaxRows, k % 1024 == 0, rows * k <= 32768, x and w 16-byte aligned.
bool StreamGemvSupported(int rows, int k, int n, const void* x, const void* w);
cudaError_t StreamGemv(const bf16* x, const bf16* w, int rows, int k, int n, void* out,
                       bool out_f32, cudaStream_t stream);

}  // namespace kvtier::cuda

#endif  // KVTIER_BENCH_MICRO_GEMV_STREAM_H_
