// The CUDA backend's weight loaders (see weight_loaders.h).
#include "backend/cuda/weight_loaders.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
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

// A host buffer reused by every tensor of one load, pinned where the driver gives pinned memory
// (uploads at the link's speed, and no page faults per tensor), grown to the largest tensor.
class HostStaging {
 public:
  HostStaging() = default;
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  ~HostStaging() { Release(); }

  absl::StatusOr<uint8_t*> Get(size_t bytes) {
    if (bytes <= size_) return data_;
    Release();
    void* p = nullptr;
    if (cudaMallocHost(&p, bytes) == cudaSuccess) {
      pinned_ = true;
    } else {
      cudaGetLastError();  // not sticky: fall back to pageable memory
      p = std::malloc(bytes);
      if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("no host memory for ", bytes, " bytes"));
    }
    data_ = static_cast<uint8_t*>(p);
    size_ = bytes;
    return data_;
  }

 private:
  void Release() {
    if (data_ != nullptr) pinned_ ? static_cast<void>(cudaFreeHost(data_)) : std::free(data_);
    data_ = nullptr, size_ = 0, pinned_ = false;
  }
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool pinned_ = false;
};

// Copies a checkpoint tensor to the device, converted to `as` (kF32, kBF16 or kF16).
absl::Status LoadFromCheckpoint(const Checkpoint& checkpoint, const std::string& name, int64_t num_elements, void* dst,
                                DType as, HostStaging& host) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.num_elements() != num_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has ", tensor.num_elements(), " elements, expected ", num_elements));
  }
  if (tensor.dtype == as) {  // stored as it will be held: one copy
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, tensor.data, tensor.nbytes(), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  if (tensor.dtype == DType::kF8E4M3 && as != DType::kF32) {  // codes times scales, a row at a time
    ASSIGN_OR_RETURN(const Fp8Scales scales, checkpoint.Fp8ScalesOf(tensor));
    ASSIGN_OR_RETURN(uint8_t* buffer, host.Get(static_cast<size_t>(num_elements) * sizeof(uint16_t)));
    uint16_t* b16 = reinterpret_cast<uint16_t*>(buffer);
    ConversionPool().ParallelFor(scales.rows, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(scales.cols));
      for (int64_t r = begin; r < end; ++r) {
        DequantizeFp8Row(tensor, scales, r, row.data());
        uint16_t* out = b16 + r * scales.cols;
        for (int64_t c = 0; c < scales.cols; ++c) {
          out[c] = as == DType::kF16 ? FloatToFp16(row[c]) : FloatToBf16(row[c]);
        }
      }
    });
    CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, b16, static_cast<size_t>(num_elements) * sizeof(uint16_t),
                                    cudaMemcpyHostToDevice));
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
                                   uint8_t* codes, float* scales, void* staging, HostStaging& host) {
  ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
  if (tensor.num_elements() != rows * cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has ", tensor.num_elements(), " elements, expected ", rows * cols));
  }
  if (tensor.dtype == DType::kBF16 || tensor.dtype == DType::kF16) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy(staging, tensor.data, tensor.nbytes(), cudaMemcpyHostToDevice));
    return QuantizeOnDevice(staging, tensor.dtype, rows, cols, codes, scales);
  }
  const size_t code_bytes = static_cast<size_t>(rows * cols), scale_offset = (code_bytes + 15) / 16 * 16;
  ASSIGN_OR_RETURN(uint8_t* buffer, host.Get(scale_offset + static_cast<size_t>(rows) * sizeof(float)));
  uint8_t* host_codes = buffer;
  float* host_scales = reinterpret_cast<float*>(buffer + scale_offset);
  if (tensor.dtype == DType::kF8E4M3) {  // an fp8 checkpoint's codes and scales, a row at a time
    ASSIGN_OR_RETURN(const Fp8Scales source, checkpoint.Fp8ScalesOf(tensor));
    ConversionPool().ParallelFor(rows, [&](int64_t begin, int64_t end) {  // rows are independent
      RequantizeFp8Rows(tensor, source, begin, end, host_codes, host_scales);
    });
  } else {
    std::vector<float> f32;
    RETURN_IF_ERROR(checkpoint.TensorAsFloat32(name, &f32, &ConversionPool()));
    ConversionPool().ParallelFor(rows, [&](int64_t begin, int64_t end) {
      ::kvtier::QuantizeRowsFp8(f32.data() + begin * cols, end - begin, cols, host_codes + begin * cols,
                                host_scales + begin);
    });
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpy(codes, host_codes, code_bytes, cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(scales, host_scales, static_cast<size_t>(rows) * sizeof(float),
                                  cudaMemcpyHostToDevice));
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
  auto host = std::make_shared<HostStaging>();  // for this loader's tensors, freed with it
  return [&checkpoint, &stage, host](const std::string& name, int64_t n, void* dst, DType as) {
    RETURN_IF_ERROR(LoadFromCheckpoint(checkpoint, name, n, dst, as, *host));
    ASSIGN_OR_RETURN(TensorView tensor, checkpoint.Tensor(name));
    return stage.Add(static_cast<int64_t>(tensor.nbytes()));
  };
}

Fp8WeightLoader CheckpointFp8WeightLoader(const Checkpoint& checkpoint, ProgressStage& stage) {
  auto host = std::make_shared<HostStaging>();  // for this loader's tensors, freed with it
  return [&checkpoint, &stage, host](const std::string& name, int64_t rows, int64_t cols, uint8_t* codes,
                                     float* scales, void* staging) {
    RETURN_IF_ERROR(LoadFp8FromCheckpoint(checkpoint, name, rows, cols, codes, scales, staging, *host));
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
