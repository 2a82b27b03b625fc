// KVT_BENCH_CUDA_CHECK(expr): for the CUDA benchmarks (not tests): a CUDA call that fails
// ends the program, naming the call, where it is and CUDA's error.
#ifndef KVTIER_TESTS_BACKEND_CUDA_BENCH_CHECK_H_
#define KVTIER_TESTS_BACKEND_CUDA_BENCH_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define KVT_BENCH_CUDA_CHECK(expr)                                                                  \
  do {                                                                                            \
    const cudaError_t kvt_bench_err_ = (expr);                                                    \
    if (kvt_bench_err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(kvt_bench_err_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

#endif  // KVTIER_TESTS_BACKEND_CUDA_BENCH_CHECK_H_
