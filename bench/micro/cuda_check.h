// CHECK(call): the micro-benchmarks' way out of a failed CUDA runtime call: prints where, the
// call and the error, and exits 1 (a benchmark has nothing to fall back to).
#ifndef KVTIER_BENCH_MICRO_CUDA_CHECK_H_
#define KVTIER_BENCH_MICRO_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

#endif  // KVTIER_BENCH_MICRO_CUDA_CHECK_H_
