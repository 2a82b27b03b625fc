// The CUDA backend's weight loaders (see weight_loaders.h).
#include "backend/cuda/weight_loaders.h"

#include <cuda_runtime.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/kernels.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "model/checkpoint.h"
#include "model/fp8_weights.h"

namespace kvtier::cuda {
namespace {

// The host's share of loading a checkpoint whose weights need converting (fp8 codes to
// 16-bit values, or re-quantized per channel): every core, rows split between them, since a
// 30B-parameter checkpoint is tens of billions of elements.
ThreadPool& ConversionPool() {
  static ThreadPool pool(0);
  return pool;
}

// Copies a checkpoint tensor to the device, converted to `as` (kF32, kBF16 or kF16).
absl::Status LoadFromCheckpoint(const Checkpoint& checkpoint, const std::string& name, int64_t num_elements, void* dst,
                                DType as) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.num_elements() != num_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has ", tensor.num_elements(), " elements, expected ", num_elements));
  }
  if (tensor.dtype == as) {  // stored as it will be held: one copy
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, tensor.data, tensor.nbytes(), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<float> f32;
  RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, &f32, &ConversionPool()));  // fp8: codes times scales
  if (as == DType::kF32) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, f32.data(), f32.size() * sizeof(float), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<uint16_t> b16(f32.size());
  ConversionPool().ParallelFor(static_cast<int64_t>(f32.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) b16[i] = as == DType::kF16 ? FloatToFp16(f32[i]) : FloatToBf16(f32[i]);
  });
  CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, b16.data(), b16.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status LoadFp8FromCheckpoint(const Checkpoint& checkpoint, const std::string& name, int64_t rows, int64_t cols,
                                   uint8_t* codes, float* scales, void* staging) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.num_elements() != rows * cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has ", tensor.num_elements(), " elements, expected ", rows * cols));
  }
  if (tensor.dtype == DType::kBF16 || tensor.dtype == DType::kF16) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(staging, tensor.data, tensor.nbytes(), cudaMemcpyHostToDevice));
    return QuantizeOnDevice(staging, tensor.dtype, rows, cols, codes, scales);
  }
  std::vector<float> f32;
  RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, &f32, &ConversionPool()));
  std::vector<uint8_t> host_codes(f32.size());
  std::vector<float> host_scales(static_cast<size_t>(rows));
  ConversionPool().ParallelFor(rows, [&](int64_t begin, int64_t end) {  // rows are independent
    ::kvtier::QuantizeRowsFp8(f32.data() + begin * cols, end - begin, cols, host_codes.data() + begin * cols,
                              host_scales.data() + begin);
  });
  CUDA_RETURN_IF_ERROR(cudaMemcpy(codes, host_codes.data(), host_codes.size(), cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(scales, host_scales.data(), host_scales.size() * sizeof(float), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

}  // namespace

absl::Status QuantizeOnDevice(const void* staging, DType dtype, int64_t rows, int64_t cols, uint8_t* codes,
                              float* scales) {
  const cudaError_t err = dtype == DType::kF16
                              ? QuantizeRowsFp8(static_cast<const f16*>(staging), rows, cols, codes, scales, nullptr)
                              : QuantizeRowsFp8(static_cast<const bf16*>(staging), rows, cols, codes, scales, nullptr);
  CUDA_RETURN_IF_ERROR(err);
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return absl::OkStatus();
}

WeightLoader CheckpointWeightLoader(const Checkpoint& checkpoint, ProgressStage& stage) {
  return [&checkpoint, &stage](const std::string& name, int64_t n, void* dst, DType as) {
    RETURN_IF_ERROR(LoadFromCheckpoint(checkpoint, name, n, dst, as));
    ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
    return stage.Add(static_cast<int64_t>(tensor.nbytes()));
  };
}

Fp8WeightLoader CheckpointFp8WeightLoader(const Checkpoint& checkpoint, ProgressStage& stage) {
  return [&checkpoint, &stage](const std::string& name, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                               void* staging) {
    RETURN_IF_ERROR(LoadFp8FromCheckpoint(checkpoint, name, rows, cols, codes, scales, staging));
    ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
    return stage.Add(static_cast<int64_t>(tensor.nbytes()));
  };
}

absl::Status FillRandomWeight(const std::string& name, int64_t n, void* dst, DType as, uint64_t seed) {
  cudaError_t err;
  if (as == DType::kF32) {
    const bool is_norm = name.find("norm") != std::string::npos;
    err = FillRandom(static_cast<float*>(dst), n, seed, is_norm ? 1.0f : 0.0f, is_norm ? 0.1f : 0.02f, nullptr);
  } else if (as == DType::kF16) {
    err = FillRandom(static_cast<f16*>(dst), n, seed, 0.0f, 0.035f, nullptr);
  } else {
    err = FillRandom(static_cast<bf16*>(dst), n, seed, 0.0f, 0.035f, nullptr);
  }
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
