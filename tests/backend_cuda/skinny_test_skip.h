// KVT_SKIP_WITHOUT_SM90(): skips a test of the skinny kernels (sm_90a code, skinny_gemm.h)
// without a compute capability 9.0 GPU, and says so.
#ifndef KVTIER_TESTS_BACKEND_CUDA_SKINNY_TEST_SKIP_H_
#define KVTIER_TESTS_BACKEND_CUDA_SKINNY_TEST_SKIP_H_

#include "backend/cuda/skinny_gemm.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"

#define KVT_SKIP_WITHOUT_SM90()                                                          \
  KVT_SKIP_WITHOUT_CUDA();                                                               \
  if (!::kvtier::cuda::SkinnyGemmDeviceOk(0)) GTEST_SKIP() << "the skinny kernels need a compute capability 9.0 GPU"

#endif  // KVTIER_TESTS_BACKEND_CUDA_SKINNY_TEST_SKIP_H_
