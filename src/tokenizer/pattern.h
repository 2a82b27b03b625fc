// Pattern: the {"String": ...} / {"Regex": ...} object of tokenizer.json, used by Replace
// normalizers and decoders and by the Split pre-tokenizer. Immutable; thread-safe.
#ifndef KVTIER_TOKENIZER_PATTERN_H_
#define KVTIER_TOKENIZER_PATTERN_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/split_regex.h"

namespace kvtier::tokenizer {

class Pattern {
 public:
  // `where` names the owning part for error messages.
  static absl::StatusOr<Pattern> FromJson(const Json& pattern, std::string_view where);

  // Non-empty matches of the pattern in text, as byte ranges, left to right.
  void FindAll(std::string_view text, std::vector<SplitRegex::Match>* matches) const;
  // Every match replaced by content (JavaScript replaceAll; no $-substitutions).
  std::string ReplaceAll(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;                // when regex_ is null
  std::shared_ptr<SplitRegex> regex_;  // shared so Pattern is copyable
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_PATTERN_H_
