// Typed field access on the nlohmann::json of tokenizer files, returning InvalidArgument
// that names the field instead of throwing. Stateless; thread-safe.
#ifndef KVTIER_TOKENIZER_JSON_FIELDS_H_
#define KVTIER_TOKENIZER_JSON_FIELDS_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kvtier::tokenizer {

using Json = nlohmann::json;

// The member, or nullptr when absent or null. InvalidArgument when obj is not an object.
absl::StatusOr<const Json*> Field(const Json& obj, std::string_view key, std::string_view where);
// Required members of a given type; `where` names the enclosing part ("model", "decoder").
absl::StatusOr<std::string> StringField(const Json& obj, std::string_view key, std::string_view where);
absl::StatusOr<const Json*> ArrayField(const Json& obj, std::string_view key, std::string_view where);
// Optional members: the default when absent or null, InvalidArgument on a wrong type.
absl::StatusOr<bool> BoolField(const Json& obj, std::string_view key, std::string_view where,
                               bool fallback);
absl::StatusOr<int64_t> IntField(const Json& obj, std::string_view key, std::string_view where,
                                 int64_t fallback);
absl::StatusOr<std::optional<std::string>> OptStringField(const Json& obj, std::string_view key,
                                                          std::string_view where);

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_JSON_FIELDS_H_
