// Helpers of the CUDA tests: device detection (tests skip without a GPU), CUDA_ASSERT, the
// per-dtype loop, and the launch options kernels are tested with; the device arrays and
// test data of cuda_test_data.h. Not thread-safe.
#ifndef KVTIER_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_
#define KVTIER_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <string>

#include "backend/cuda/kernels.h"
#include "backend/cuda_options.h"
#include "common/thread_pool.h"
#include "cuda_test_data.h"
#include "gtest/gtest.h"

namespace kvtier::cuda_test {

// Empty when a CUDA device is usable, else why not.
inline std::string NoCudaDeviceReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(err);
  }
  if (count == 0) return "no CUDA device present";
  return "";
}

#define KVT_SKIP_WITHOUT_CUDA()                                          \
  do {                                                                   \
    const std::string kvt_reason_ = ::kvtier::cuda_test::NoCudaDeviceReason(); \
    if (!kvt_reason_.empty()) GTEST_SKIP() << kvt_reason_;               \
  } while (0)

#define CUDA_ASSERT(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// The head and block geometry of an attention test case.
struct AttentionShape {
  int heads, kv_heads, head_dim, block_tokens;
};

// A test over parameters P that skips without a CUDA device; rng_ is seeded at random.
template <typename P>
class CudaParamTest : public ::testing::TestWithParam<P> {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
  std::mt19937 rng_{std::random_device{}()};
};

// Kernels are tested as the backend launches them by default; tests of a launcher whose
// options pick other kernel variants (GEMV prefetch depth, PDL early trigger) try those too.
inline constexpr CudaLaunchOptions kDefaultLaunch{};

// Every processor, for the CPU references of the kernel tests (the CPU kernels give the same
// bits on any pool): their references take most of a test program's time on one thread.
inline ThreadPool* ReferencePool() {
  static ThreadPool pool(0);
  return &pool;
}

// Runs fn.template operator()<T>() for T = bf16, then f16, each under a trace naming it.
template <typename Fn>
void ForEachElem(Fn&& fn) {
  {
    SCOPED_TRACE(Elem16<cuda::bf16>::kName);
    fn.template operator()<cuda::bf16>();
  }
  {
    SCOPED_TRACE(Elem16<cuda::f16>::kName);
    fn.template operator()<cuda::f16>();
  }
}

// The gated MLP product in double precision: act(g) * u, act SiLU or transformers'
// gelu_pytorch_tanh (cpu_ops.cc GeluTanhMul's formula).
inline double GateRef(cuda::GateActivation act, double g, double u) {
  if (act == cuda::GateActivation::kGeluTanh) {
    return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u;
  }
  return g / (1.0 + std::exp(-g)) * u;
}
inline constexpr cuda::GateActivation kGateActivations[] = {cuda::GateActivation::kSilu,
                                                            cuda::GateActivation::kGeluTanh};

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_CUDA_TEST_UTIL_H_
