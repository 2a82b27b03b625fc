// CHECK(call): the micro-benchmarks' name for the CUDA benchmarks' KVT_BENCH_CUDA_CHECK
// (tests/backend_cuda/bench_check.h): a failed CUDA runtime call ends the program, naming the
// call, where it is and CUDA's error.
#ifndef KVTIER_BENCH_MICRO_CUDA_CHECK_H_
#define KVTIER_BENCH_MICRO_CUDA_CHECK_H_

#include "../../tests/backend_cuda/bench_check.h"

#define CHECK(x) KVT_BENCH_CUDA_CHECK(x)

#endif  // KVTIER_BENCH_MICRO_CUDA_CHECK_H_
