// DType: the number formats of tensors kvtier reads and writes, and the one table of their
// names and sizes (safetensors' / ggml's spelling, the transformers torch_dtype spelling,
// block geometry) that every lookup below reads. constexpr, so that other format tables
// (gguf_types.cc's ggml types) can be checked against it at compile time. Thread-safe.
#ifndef KVTIER_MODEL_DTYPE_H_
#define KVTIER_MODEL_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

namespace kvtier {

// kF8E4M3: e4m3fn codes (common/fp8_e4m3.h). A tensor of this dtype holds unscaled codes;
// its scales are separate tensors whose layout the checkpoint's quantization says
// (model/fp8_weights.h turns code + scale into values).
// kQ8_0 ... kQ6_K: GGUF's block-quantized types (model/block_quants.h). Elements are stored
// in self-contained blocks of DTypeBlockElements() along the innermost dimension, each
// with its own scales, so a row of such a tensor is a whole number of blocks.
enum class DType { kF32, kF16, kBF16, kF8E4M3, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K };

struct DTypeInfo {
  DType dtype;
  std::string_view name;        // safetensors' spelling; ggml's for the block types
  std::string_view torch_name;  // config.json's torch_dtype; empty: none
  int64_t block_elements;       // 1 for an element type
  size_t block_bytes;           // the element size for an element type
};

// In DType's order.
inline constexpr DTypeInfo kDTypeTable[] = {
    {DType::kF32, "F32", "float32", 1, 4},
    {DType::kF16, "F16", "float16", 1, 2},
    {DType::kBF16, "BF16", "bfloat16", 1, 2},
    {DType::kF8E4M3, "F8_E4M3", "", 1, 1},
    {DType::kQ8_0, "Q8_0", "", 32, 34},
    {DType::kQ4_0, "Q4_0", "", 32, 18},
    {DType::kQ4_K, "Q4_K", "", 256, 144},
    {DType::kQ5_K, "Q5_K", "", 256, 176},
    {DType::kQ6_K, "Q6_K", "", 256, 210},
};

constexpr const DTypeInfo& GetDTypeInfo(DType dtype) { return kDTypeTable[static_cast<size_t>(dtype)]; }

// "F32", "F16", "BF16", "F8_E4M3", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K".
constexpr std::string_view DTypeName(DType dtype) { return GetDTypeInfo(dtype).name; }

// The DType DTypeName spells `name` (case-sensitive); nullopt for any other name.
constexpr std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeInfo& info : kDTypeTable) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

// config.json's torch_dtype spelling of the three float types ("float32", "float16",
// "bfloat16"); nullopt for the others.
constexpr std::optional<std::string_view> TorchDTypeName(DType dtype) {
  const std::string_view name = GetDTypeInfo(dtype).torch_name;
  if (name.empty()) return std::nullopt;
  return name;
}

// The float type a torch_dtype spelling names; nullopt for any other spelling.
constexpr std::optional<DType> DTypeFromTorchName(std::string_view name) {
  for (const DTypeInfo& info : kDTypeTable) {
    if (!info.torch_name.empty() && info.torch_name == name) return info.dtype;
  }
  return std::nullopt;
}

// Elements per block: 1 for element types, 32 (Q8_0, Q4_0) or 256 (the K types).
constexpr int64_t DTypeBlockElements(DType dtype) { return GetDTypeInfo(dtype).block_elements; }
constexpr bool IsBlockQuantized(DType dtype) { return DTypeBlockElements(dtype) > 1; }
// Bytes of one block (the element size for element types).
constexpr size_t DTypeBlockBytes(DType dtype) { return GetDTypeInfo(dtype).block_bytes; }
// Bytes per element of an element type; 0 for a block-quantized type (see DTypeBytes).
constexpr size_t DTypeSize(DType dtype) { return IsBlockQuantized(dtype) ? 0 : DTypeBlockBytes(dtype); }
// Bytes of num_elements elements (a whole number of blocks for block types).
constexpr size_t DTypeBytes(DType dtype, int64_t num_elements) {
  return static_cast<size_t>(num_elements / DTypeBlockElements(dtype)) * DTypeBlockBytes(dtype);
}

namespace dtype_internal {
constexpr bool TableInDTypeOrder() {
  for (size_t i = 0; i < std::size(kDTypeTable); ++i) {
    if (static_cast<size_t>(kDTypeTable[i].dtype) != i) return false;
  }
  return std::size(kDTypeTable) == static_cast<size_t>(DType::kQ6_K) + 1;
}
static_assert(TableInDTypeOrder(), "kDTypeTable lists every DType once, in the enum's order");
}  // namespace dtype_internal

}  // namespace kvtier

#endif  // KVTIER_MODEL_DTYPE_H_
