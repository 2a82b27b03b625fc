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
// kQ8_0 ... kQ6_K: GGUF's block-quantized types (model/block_quants.h). Elements are stored
// in self-contained blocks of DTypeBlockElements() along the innermost dimension, each
// with its own scales, so a row of such a tensor is a whole number of blocks.
enum class DType { kF32, kF16, kBF16, kF8E4M3, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K };

// safetensors spelling: "F32", "F16", "BF16", "F8_E4M3"; ggml's for the block types:
// "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K".
std::string_view DTypeName(DType dtype);
// Bytes per element of an element type; 0 for a block-quantized type (see DTypeBytes).
size_t DTypeSize(DType dtype);
bool IsBlockQuantized(DType dtype);
// Elements per block: 1 for element types, 32 (Q8_0, Q4_0) or 256 (the K types).
int64_t DTypeBlockElements(DType dtype);
// Bytes of one block (the element size for element types).
size_t DTypeBlockBytes(DType dtype);
// Bytes of num_elements elements (a whole number of blocks for block types).
size_t DTypeBytes(DType dtype, int64_t num_elements);

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

// Converts the whole tensor to fp32 into out (resized); block types are dequantized.
void ToFloat32(const TensorView& tensor, std::vector<float>* out);

// Scalar conversions (round-to-nearest-even on narrowing).
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Fp16ToFloat(uint16_t bits);
uint16_t FloatToFp16(float value);

}  // namespace kvtier

#endif  // KVTIER_MODEL_TENSOR_H_
