// Where the CUDA backend's weights come from: a loader fills one device buffer with a named
// tensor (from a checkpoint, or random for benchmarks and tests) and CudaWeights calls it
// once per tensor. Loaders run on the thread creating the backend.
#ifndef KVTIER_BACKEND_CUDA_WEIGHT_LOADERS_H_
#define KVTIER_BACKEND_CUDA_WEIGHT_LOADERS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "common/progress.h"
#include "model/tensor.h"

namespace kvtier {

class Checkpoint;

namespace cuda {

// name, expected element count, device destination, dtype to store (kF32 or the backend's
// 16-bit dtype).
using WeightLoader = std::function<absl::Status(const std::string&, int64_t, void*, DType)>;
// weight_dtype fp8: name, rows, cols, device codes (rows, cols) and scales (rows) to fill
// with the per-output-channel quantization, and a 16-bit device staging buffer of at least
// rows * cols elements the loader may use.
using Fp8WeightLoader = std::function<absl::Status(const std::string&, int64_t, int64_t, uint8_t*, float*, void*)>;

// Checkpoint tensors converted to the dtype asked for, each reported to `stage` by its bytes.
WeightLoader CheckpointWeightLoader(const Checkpoint& checkpoint, ProgressStage& stage);
// weight_dtype fp8 from a checkpoint: 16-bit tensors are copied as they are and quantized
// on the device (seconds for an 8B model); fp32 and fp8 tensors are quantized on the host
// from their fp32 values (an fp8 tensor: codes times its own scales, whatever their layout),
// which is what the CPU backend does, so both hold the same codes and scales.
Fp8WeightLoader CheckpointFp8WeightLoader(const Checkpoint& checkpoint, ProgressStage& stage);

// Fills `dst` with random values for a tensor named `name` (norms around 1, the rest
// around 0), from `seed`.
absl::Status FillRandomWeight(const std::string& name, int64_t n, void* dst, DType as, uint64_t seed);

// Per-output-channel fp8 of a (rows, cols) 16-bit matrix already on the device (`staging`,
// elements of `dtype`), on the device; waits for it (the staging buffer is reused next).
absl::Status QuantizeOnDevice(const void* staging, DType dtype, int64_t rows, int64_t cols, uint8_t* codes,
                              float* scales);

}  // namespace cuda
}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_WEIGHT_LOADERS_H_
