// TensorView: a typed, shaped, read-only view of bytes owned elsewhere (an mmap), and the
// scalar conversions of the 16-bit float types.
// Plain value types; thread-safe to copy and read.
#ifndef KVTIER_MODEL_TENSOR_H_
#define KVTIER_MODEL_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/dtype.h"

namespace kvtier {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // nbytes() bytes, little-endian, row-major
  int64_t num_elements() const;
  size_t nbytes() const { return DTypeBytes(dtype, num_elements()); }
  // Element i converted to float (bf16/fp16/fp8 widened exactly; fp8 codes unscaled; a
  // block type's element dequantized from its block).
  float ElementAsFloat(int64_t i) const;
};

// "[2, 3]": a shape as error messages print it.
std::string ShapeString(const std::vector<int64_t>& shape);

// Converts the whole tensor to fp32 into out (resized); block types are dequantized.
void ToFloat32(const TensorView& tensor, std::vector<float>* out);

// Scalar conversions (round-to-nearest-even on narrowing).
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Fp16ToFloat(uint16_t bits);
uint16_t FloatToFp16(float value);

}  // namespace kvtier

#endif  // KVTIER_MODEL_TENSOR_H_
