// The cuBLAS data type of the 16-bit compute element types (kernels.h's bf16 and f16).
#ifndef KVTIER_BACKEND_CUDA_CUBLAS_TYPE_H_
#define KVTIER_BACKEND_CUDA_CUBLAS_TYPE_H_

#include <library_types.h>

#include <type_traits>

#include "backend/cuda/kernels.h"

namespace kvtier::cuda {

template <typename T>
constexpr cudaDataType_t CublasType() {
  static_assert(std::is_same_v<T, f16> || std::is_same_v<T, bf16>);
  return std::is_same_v<T, f16> ? CUDA_R_16F : CUDA_R_16BF;
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_CUBLAS_TYPE_H_
