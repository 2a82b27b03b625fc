// DType and TensorView: a typed, shaped, read-only view of bytes owned elsewhere (an mmap).
// Plain value types; thread-safe to copy and read.
#ifndef KVTIER_MODEL_TENSOR_H_
#define KVTIER_MODEL_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier {

// kF8E4M3: e4m3fn codes (common/fp8_e4m3.h). A tensor of this dtype holds unscaled codes;
// its scales are separate tensors whose layout the checkpoint's quantization says
// (model/fp8_weights.h turns code + scale into values).
enum class DType { kF32, kF16, kBF16, kF8E4M3 };

// safetensors spelling: "F32", "F16", "BF16", "F8_E4M3"
std::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // nbytes() bytes, little-endian, row-major
  int64_t num_elements() const;
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype); }
  // Element i converted to float (bf16/fp16/fp8 widened exactly; fp8 codes unscaled).
  float ElementAsFloat(int64_t i) const;
};

// Converts the whole tensor to fp32 into out (resized).
void ToFloat32(const TensorView& tensor, std::vector<float>* out);

// Scalar conversions (round-to-nearest-even on narrowing).
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Fp16ToFloat(uint16_t bits);
uint16_t FloatToFp16(float value);

}  // namespace kvtier

#endif  // KVTIER_MODEL_TENSOR_H_
