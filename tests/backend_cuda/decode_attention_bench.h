// Timings of the decode attention kernel alone (part of kvtier_cuda_bench; not a test).
#ifndef KVTIER_TESTS_BACKEND_CUDA_DECODE_ATTENTION_BENCH_H_
#define KVTIER_TESTS_BACKEND_CUDA_DECODE_ATTENTION_BENCH_H_

#include "backend/cuda_options.h"

namespace kvtier::cuda {

// Times DecodeAttention (launched as `launch` says) against the generic PagedAttention on
// Llama-3-8B decode shapes, one line per case and per max_splits of a sweep, and
// cross-checks the two outputs. Returns 0, or 1 after printing why when a launch fails or
// the kernels disagree.
int TimeDecodeAttention(const CudaLaunchOptions& launch);

}  // namespace kvtier::cuda

#endif  // KVTIER_TESTS_BACKEND_CUDA_DECODE_ATTENTION_BENCH_H_
