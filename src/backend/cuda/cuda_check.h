// CUDA_RETURN_IF_ERROR / CUBLAS_RETURN_IF_ERROR: turn a failed CUDA runtime or cuBLAS call
// into an Aborted status (common/errors.h BackendError) naming the call. Stateless macros; thread-safe.
#ifndef KVTIER_BACKEND_CUDA_CUDA_CHECK_H_
#define KVTIER_BACKEND_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "absl/status/status.h"

#define CUDA_RETURN_IF_ERROR(expr)                                                      \
  do {                                                                                  \
    const cudaError_t kvt_cuda_err_ = (expr);                                           \
    if (kvt_cuda_err_ != cudaSuccess) {                                                 \
      /* Cleared: a failed call the caller survives must not fail the next launch. */   \
      cudaGetLastError();                                                               \
      return ::absl::AbortedError(::absl::StrCat(#expr, ": ",                         \
                                                   cudaGetErrorString(kvt_cuda_err_))); \
    }                                                                                   \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(expr)                                                       \
  do {                                                                                     \
    const cublasStatus_t kvt_cublas_err_ = (expr);                                         \
    if (kvt_cublas_err_ != CUBLAS_STATUS_SUCCESS) {                                        \
      return ::absl::AbortedError(::absl::StrCat(#expr, ": cuBLAS status ",              \
                                                   static_cast<int>(kvt_cublas_err_)));    \
    }                                                                                      \
  } while (0)

#endif  // KVTIER_BACKEND_CUDA_CUDA_CHECK_H_
