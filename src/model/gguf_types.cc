// GGUF metadata values and the ggml type table (gguf_types.h). Stateless; thread-safe.
#include "model/gguf_types.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

// ggml's type codes, names and block sizes (ggml.h / ggml-common.h). Codes 4, 5 and 31-33,
// 36-38 were removed from the format.
constexpr GgmlType kTypes[] = {
    {0, "F32", 1, 4, DType::kF32},
    {1, "F16", 1, 2, DType::kF16},
    {2, "Q4_0", 32, 18, DType::kQ4_0},
    {3, "Q4_1", 32, 20, std::nullopt},
    {6, "Q5_0", 32, 22, std::nullopt},
    {7, "Q5_1", 32, 24, std::nullopt},
    {8, "Q8_0", 32, 34, DType::kQ8_0},
    {9, "Q8_1", 32, 36, std::nullopt},
    {10, "Q2_K", 256, 84, std::nullopt},
    {11, "Q3_K", 256, 110, std::nullopt},
    {12, "Q4_K", 256, 144, DType::kQ4_K},
    {13, "Q5_K", 256, 176, DType::kQ5_K},
    {14, "Q6_K", 256, 210, DType::kQ6_K},
    {15, "Q8_K", 256, 292, std::nullopt},
    {16, "IQ2_XXS", 256, 66, std::nullopt},
    {17, "IQ2_XS", 256, 74, std::nullopt},
    {18, "IQ3_XXS", 256, 98, std::nullopt},
    {19, "IQ1_S", 256, 50, std::nullopt},
    {20, "IQ4_NL", 32, 18, std::nullopt},
    {21, "IQ3_S", 256, 110, std::nullopt},
    {22, "IQ2_S", 256, 82, std::nullopt},
    {23, "IQ4_XS", 256, 136, std::nullopt},
    {24, "I8", 1, 1, std::nullopt},
    {25, "I16", 1, 2, std::nullopt},
    {26, "I32", 1, 4, std::nullopt},
    {27, "I64", 1, 8, std::nullopt},
    {28, "F64", 1, 8, std::nullopt},
    {29, "IQ1_M", 256, 56, std::nullopt},
    {30, "BF16", 1, 2, DType::kBF16},
    {34, "TQ1_0", 256, 54, std::nullopt},
    {35, "TQ2_0", 256, 66, std::nullopt},
    {39, "MXFP4", 32, 17, std::nullopt},
    {40, "NVFP4", 64, 36, std::nullopt},
    {41, "Q1_0", 128, 18, std::nullopt},
    {42, "Q2_0", 64, 18, std::nullopt},
};

// The types kvtier reads are the DType table's (model/dtype.h): same names, same blocks.
constexpr bool AgreesWithDTypeTable() {
  for (const GgmlType& t : kTypes) {
    if (t.dtype.has_value() && (t.name != DTypeName(*t.dtype) || t.block_elements != DTypeBlockElements(*t.dtype) ||
                                t.block_bytes != DTypeBlockBytes(*t.dtype))) {
      return false;
    }
  }
  return true;
}
static_assert(AgreesWithDTypeTable(), "a ggml type kvtier reads differs from its DType table entry");

}  // namespace

std::optional<std::string_view> GgufValueTypeName(uint32_t code) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",   "u16", "i16", "u32", "i32", "f32",
                                                "bool", "str", "arr", "u64", "i64", "f64"};
  if (code >= std::size(kNames)) return std::nullopt;
  return kNames[code];
}

size_t GgufValueTypeSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

GgufValue GgufValue::Scalar(GgufValueType type, int64_t value) {
  GgufValue v;
  v.type_ = v.element_type_ = type;
  v.ints_ = {value};
  return v;
}

GgufValue GgufValue::Real(GgufValueType type, double value) {
  GgufValue v;
  v.type_ = v.element_type_ = type;
  v.reals_ = {value};
  return v;
}

GgufValue GgufValue::String(std::string value) {
  GgufValue v;
  v.type_ = v.element_type_ = GgufValueType::kString;
  v.strings_.push_back(std::move(value));
  return v;
}

GgufValue GgufValue::IntArray(GgufValueType element_type, std::vector<int64_t> values) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.element_type_ = element_type;
  v.ints_ = std::move(values);
  return v;
}

GgufValue GgufValue::RealArray(GgufValueType element_type, std::vector<double> values) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.element_type_ = element_type;
  v.reals_ = std::move(values);
  return v;
}

GgufValue GgufValue::StringArray(std::vector<std::string> values) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.element_type_ = GgufValueType::kString;
  v.strings_ = std::move(values);
  return v;
}

size_t GgufValue::size() const {
  switch (element_type_) {
    case GgufValueType::kString:
      return strings_.size();
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      return reals_.size();
    default:
      return ints_.size();
  }
}

bool GgufValue::IsIntegerType() const {
  switch (element_type_) {
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:
    case GgufValueType::kArray:
    case GgufValueType::kBool:
      return false;
    default:
      return true;
  }
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (is_array() || !IsIntegerType() || ints_.size() != 1) return std::nullopt;
  if (type_ == GgufValueType::kUint64 && ints_[0] < 0) return std::nullopt;  // above INT64_MAX
  return ints_[0];
}

std::optional<double> GgufValue::AsReal() const {
  if (is_array()) return std::nullopt;
  if ((type_ == GgufValueType::kFloat32 || type_ == GgufValueType::kFloat64) && reals_.size() == 1) return reals_[0];
  if (std::optional<int64_t> i = AsInt()) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufValueType::kBool || ints_.size() != 1) return std::nullopt;
  return ints_[0] != 0;
}

const std::string* GgufValue::AsString() const {
  return type_ == GgufValueType::kString && strings_.size() == 1 ? &strings_[0] : nullptr;
}

std::string GgufValue::Describe(size_t max_elements) const {
  auto element = [this](size_t i) -> std::string {
    switch (element_type_) {
      case GgufValueType::kString:
        return nlohmann::json(strings_[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      case GgufValueType::kFloat32:
      case GgufValueType::kFloat64:
        return absl::StrCat(reals_[i]);
      case GgufValueType::kBool:
        return ints_[i] != 0 ? "true" : "false";
      case GgufValueType::kUint64:
        return absl::StrCat(static_cast<uint64_t>(ints_[i]));
      default:
        return absl::StrCat(ints_[i]);
    }
  };
  if (!is_array()) return size() == 1 ? element(0) : "";
  std::vector<std::string> parts;
  for (size_t i = 0; i < size() && i < max_elements; ++i) parts.push_back(element(i));
  if (size() > max_elements) {
    parts.push_back(absl::StrCat("... (", size(), " ", std::string(*GgufValueTypeName(static_cast<uint32_t>(element_type_))), ")"));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

const GgmlType* FindGgmlType(uint32_t code) {
  for (const GgmlType& t : kTypes) {
    if (t.code == code) return &t;
  }
  return nullptr;
}

const GgmlType* GgmlTypeOf(DType dtype) {
  for (const GgmlType& t : kTypes) {
    if (t.dtype == dtype) return &t;
  }
  return nullptr;
}

std::string SupportedGgmlTypeNames() {
  std::vector<std::string> names;
  for (const GgmlType& t : kTypes) {
    if (t.dtype.has_value()) names.emplace_back(t.name);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace kvtier
