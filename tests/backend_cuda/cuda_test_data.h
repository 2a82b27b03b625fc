// Test data of the CUDA tests and benchmarks, without gtest: RAII device arrays,
// bf16/fp16-representable random data with per-dtype tolerances, and relative-error checks.
// Not thread-safe.
#ifndef KVTIER_TESTS_BACKEND_CUDA_CUDA_TEST_DATA_H_
#define KVTIER_TESTS_BACKEND_CUDA_CUDA_TEST_DATA_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels.h"
#include "backend/kv_layout.h"
#include "model/tensor.h"
#include "testing/relative_error.h"

namespace kvtier::cuda_test {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    if (cudaMalloc(&ptr_, std::max<size_t>(count, 1) * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
    Poison();
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return count_; }
  // 0xFF bytes: NaN as f32, bf16 and fp16.
  void Poison() { cudaMemset(ptr_, 0xFF, count_ * sizeof(T)); }
  void Upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Download() const {
    std::vector<T> host(count_);
    cudaDeviceSynchronize();
    cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t count_ = 0;
};

inline std::vector<float> RandomF32(size_t count, std::mt19937& rng, float lo = -1.0f,
                                    float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// Host-side facts of a 16-bit element type the kernels are instantiated for.
template <typename T>
struct Elem16;
template <>
struct Elem16<cuda::bf16> {
  static constexpr const char* kName = "bf16";
  // Relative error bound of a kernel's output against the fp32 reference: a few roundings
  // to 8 significant bits.
  static constexpr double kTolerance = 1e-2;
  static uint16_t Bits(float v) { return FloatToBf16(v); }
  static float Value(uint16_t bits) { return Bf16ToFloat(bits); }
};
template <>
struct Elem16<cuda::f16> {
  static constexpr const char* kName = "f16";
  // 11 significant bits: 8x tighter than bf16, so a kernel that rounds through bf16 fails.
  static constexpr double kTolerance = 2.5e-3;
  static uint16_t Bits(float v) { return FloatToFp16(v); }
  static float Value(uint16_t bits) { return Fp16ToFloat(bits); }
};
template <typename T>
constexpr double Tolerance() { return Elem16<T>::kTolerance; }

// Random values representable in T: `bits` for the device, `values` for the reference.
struct Data16 {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
template <typename T>
Data16 Random16(size_t count, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Data16 d;
  d.bits.resize(count);
  d.values.resize(count);
  for (size_t i = 0; i < count; ++i) {
    d.bits[i] = Elem16<T>::Bits(dist(rng));
    d.values[i] = Elem16<T>::Value(d.bits[i]);
  }
  return d;
}
template <typename T>
std::vector<float> ToF32(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = Elem16<T>::Value(bits[i]);
  return v;
}

// `count` elements of device memory (at least one), freed with the object; ptr is null
// when the allocation failed.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t count) { cudaMalloc(&ptr, std::max<size_t>(count, 1) * sizeof(T)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// The PagedKv view the attention kernels read of a pool laid out as `layout` (16-bit, or
// fp8 codes with their row scales), with the chunks' flattened block tables (device arrays).
template <typename T>
cuda::PagedKv<T> PagedKvOf(const KvLayout& layout, T* pool, const int32_t* indices, const int32_t* indptr) {
  cuda::PagedKv<T> kv;
  kv.pool = pool;
  kv.indices = indices;
  kv.indptr = indptr;
  kv.block_elements = layout.ElementsPerBlock();
  kv.num_kv_heads = static_cast<int32_t>(layout.num_kv_heads);
  kv.head_dim = static_cast<int32_t>(layout.head_dim);
  kv.block_tokens = static_cast<int32_t>(layout.block_tokens);
  if (layout.dtype == DType::kF8E4M3) {
    kv.fp8 = true;
    kv.block_bytes = static_cast<int64_t>(layout.BlockBytes());
  }
  return kv;
}

// Random e4m3 codes (no NaN) of a (rows, cols) fp8 matrix and a scale per row drawn from
// [scale_lo, scale_hi).
inline void RandomFp8(int64_t rows, int64_t cols, std::mt19937& rng, std::vector<uint8_t>* codes,
                      std::vector<float>* scales, float scale_lo = 1e-4f, float scale_hi = 1e-2f) {
  codes->resize(static_cast<size_t>(rows * cols));
  std::uniform_int_distribution<int> code(0, 255);
  for (uint8_t& c : *codes) {
    do c = static_cast<uint8_t>(code(rng)); while ((c & 0x7f) == 0x7f);
  }
  scales->resize(static_cast<size_t>(rows));
  std::uniform_real_distribution<float> scale(scale_lo, scale_hi);
  for (float& s : *scales) s = scale(rng);
}

using ::kvtier::testing::RelativeError;

// The CPU backend's form of the kernels' AttentionScores (0: the default), for references.
inline AttentionOptions CpuAttentionOptions(const cuda::AttentionScores& scores) {
  AttentionOptions options;
  if (scores.scale > 0.0f) options.scale = scores.scale;
  if (scores.logit_softcap > 0.0f) options.logit_softcap = scores.logit_softcap;
  if (scores.window > 0) options.window = scores.window;
  return options;
}

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_CUDA_TEST_DATA_H_
