// PreTokenizer: the "pre_tokenizer" part of tokenizer.json, splitting normalized text into
// the words BPE runs on. Immutable after creation; thread-safe.
#ifndef KVTIER_TOKENIZER_PRE_TOKENIZER_H_
#define KVTIER_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/split_regex.h"

namespace kvtier::tokenizer {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;

  // Supported types: Sequence, Split (Isolated or Removed), ByteLevel, Metaspace.
  // Null config: nullptr. Other types or split behaviours: Unimplemented.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const Json& config);
  // Metaspace as transformers.js builds it for non-legacy Llama tokenizers.
  static std::unique_ptr<PreTokenizer> MakeMetaspace(std::string replacement, bool add_prefix_space,
                                                     bool prepend_first_only);
  // ByteLevel without a prefix space, splitting at the matches of `regex` (which must
  // match every character, as the known patterns do; text between matches is dropped).
  static std::unique_ptr<PreTokenizer> MakeByteLevel(std::unique_ptr<SplitRegex> regex);

  // Replaces each piece by its parts. section_index counts the stretches of text between
  // added tokens (Metaspace's prepend_scheme "first" prepends in section 0 only).
  virtual void PreTokenize(std::vector<std::string>* pieces, int section_index) const = 0;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_PRE_TOKENIZER_H_
