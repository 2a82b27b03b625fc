// Typed field access on tokenizer JSON.
#include "tokenizer/json_fields.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/strings.h"

namespace kvtier::tokenizer {
namespace {

absl::Status WrongType(std::string_view where, std::string_view key, std::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer file: field '", Av(where), ".", Av(key), "' must be ", Av(want)));
}

}  // namespace

absl::StatusOr<const Json*> Field(const Json& obj, std::string_view key, std::string_view where) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer file: '", Av(where), "' must be an object"));
  }
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> StringField(const Json& obj, std::string_view key, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Field(obj, key, where));
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer file: missing field '", Av(where), ".", Av(key), "'"));
  }
  if (!v->is_string()) return WrongType(where, key, "a string");
  return v->get<std::string>();
}

absl::StatusOr<const Json*> ArrayField(const Json& obj, std::string_view key, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Field(obj, key, where));
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer file: missing field '", Av(where), ".", Av(key), "'"));
  }
  if (!v->is_array()) return WrongType(where, key, "an array");
  return v;
}

absl::StatusOr<bool> BoolField(const Json& obj, std::string_view key, std::string_view where,
                               bool fallback) {
  ASSIGN_OR_RETURN(const Json* v, Field(obj, key, where));
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return WrongType(where, key, "a boolean");
  return v->get<bool>();
}

absl::StatusOr<int64_t> IntField(const Json& obj, std::string_view key, std::string_view where,
                                 int64_t fallback) {
  ASSIGN_OR_RETURN(const Json* v, Field(obj, key, where));
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) return WrongType(where, key, "an integer");
  return v->get<int64_t>();
}

absl::StatusOr<std::optional<std::string>> OptStringField(const Json& obj, std::string_view key,
                                                          std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Field(obj, key, where));
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(where, key, "a string");
  return std::optional<std::string>(v->get<std::string>());
}

}  // namespace kvtier::tokenizer
