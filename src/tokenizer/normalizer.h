// Normalizer: the "normalizer" part of tokenizer.json, applied to each stretch of text
// between added tokens before pre-tokenization. Immutable after creation; thread-safe.
#ifndef KVTIER_TOKENIZER_NORMALIZER_H_
#define KVTIER_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"

namespace kvtier::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;

  // Supported types: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip,
  // StripAccents. Null config: returns nullptr (no normalizer). Other types: Unimplemented.
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(const Json& config);

  virtual absl::StatusOr<std::string> Normalize(std::string text) const = 0;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_NORMALIZER_H_
