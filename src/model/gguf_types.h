// The vocabulary of the GGUF format: metadata value types, metadata values, and ggml's
// tensor types with their block geometry. Value types; thread-safe to share.
#ifndef KVTIER_MODEL_GGUF_TYPES_H_
#define KVTIER_MODEL_GGUF_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/tensor.h"

namespace kvtier {

// The on-disk codes of metadata value types.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "u8", "i32", "f32", "bool", "str", "arr", ...; nullopt for a code the format does not define.
std::optional<std::string_view> GgufValueTypeName(uint32_t code);
// Bytes of one value of a fixed-size type (0 for kString and kArray).
size_t GgufValueTypeSize(GgufValueType type);

// A metadata value: a scalar, or an array of scalars of one type (the format's arrays of
// arrays are refused by the reader, as llama.cpp refuses them). Whatever its type, a value
// is held in one of three vectors: integers (every integer type and bool; a uint64 above
// INT64_MAX keeps its bit pattern), reals (f32/f64) or strings. A scalar is a vector of one.
class GgufValue {
 public:
  GgufValue() = default;
  static GgufValue Scalar(GgufValueType type, int64_t value);  // an integer type or kBool
  static GgufValue Real(GgufValueType type, double value);     // kFloat32 or kFloat64
  static GgufValue String(std::string value);
  static GgufValue Bool(bool value) { return Scalar(GgufValueType::kBool, value ? 1 : 0); }
  static GgufValue Uint32(uint32_t value) { return Scalar(GgufValueType::kUint32, value); }
  static GgufValue Int32(int32_t value) { return Scalar(GgufValueType::kInt32, value); }
  static GgufValue Float32(float value) { return Real(GgufValueType::kFloat32, value); }
  static GgufValue IntArray(GgufValueType element_type, std::vector<int64_t> values);
  static GgufValue RealArray(GgufValueType element_type, std::vector<double> values);
  static GgufValue StringArray(std::vector<std::string> values);

  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::kArray; }
  // The type of the scalar, or of an array's elements.
  GgufValueType element_type() const { return element_type_; }
  size_t size() const;

  // A scalar of an integer type (not bool); nullopt otherwise or for a uint64 above INT64_MAX.
  std::optional<int64_t> AsInt() const;
  // A scalar of a real or integer type.
  std::optional<double> AsReal() const;
  std::optional<bool> AsBool() const;
  // A string scalar; nullptr otherwise.
  const std::string* AsString() const;

  const std::vector<int64_t>& ints() const { return ints_; }
  const std::vector<double>& reals() const { return reals_; }
  const std::vector<std::string>& strings() const { return strings_; }

  // For people: the value, arrays shortened to their first `max_elements` elements.
  std::string Describe(size_t max_elements = 8) const;

 private:
  bool IsIntegerType() const;

  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType element_type_ = GgufValueType::kUint8;
  std::vector<int64_t> ints_;
  std::vector<double> reals_;
  std::vector<std::string> strings_;
};

// Metadata in file order.
using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

// One of ggml's tensor types: its code in a GGUF file, name, and block geometry (every
// type kvtier can bound-check, including the ones it cannot compute with).
struct GgmlType {
  uint32_t code = 0;
  std::string_view name;     // "F32", "Q4_K", ...
  int64_t block_elements = 1;
  size_t block_bytes = 0;
  std::optional<DType> dtype;  // the kvtier dtype, when kvtier reads this type
};

// nullptr for a code ggml does not define (or has removed).
const GgmlType* FindGgmlType(uint32_t code);
// The ggml type of a kvtier dtype; nullptr for F8_E4M3, which GGUF does not have.
const GgmlType* GgmlTypeOf(DType dtype);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K": the types kvtier reads.
std::string SupportedGgmlTypeNames();

}  // namespace kvtier

#endif  // KVTIER_MODEL_GGUF_TYPES_H_
