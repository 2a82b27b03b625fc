// AddedTokens: the "added_tokens" of tokenizer.json (special and not), found in raw text
// before normalization by leftmost-longest matching, with lstrip/rstrip applied to the
// neighbouring text as the reference does. Immutable after creation; thread-safe.
#ifndef KVTIER_TOKENIZER_ADDED_TOKENS_H_
#define KVTIER_TOKENIZER_ADDED_TOKENS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/strings.h"

namespace kvtier::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;  // read but, as in the reference, not applied
  bool normalized = false;   // read but, as in the reference, not applied
};

// A stretch of input: an added token (token_index set) or text to normalize and BPE.
struct Section {
  std::string_view text;
  std::optional<size_t> token_index;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // json: the "added_tokens" array (null: none).
  static absl::StatusOr<AddedTokens> FromJson(const Json& json);

  // Splits text at added tokens; with include_special false, special tokens are left as
  // text. Empty sections are dropped and lstrip/rstrip trim the neighbours.
  void Split(std::string_view text, bool include_special, std::vector<Section>* sections) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The token whose content is exactly text.
  const AddedToken* Find(std::string_view text) const;

 private:
  // Byte trie over all contents; node 0 is the root.
  struct TrieNode {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                        // index into tokens_
  };
  int32_t Child(int32_t node, unsigned char byte) const;

  std::vector<AddedToken> tokens_;
  StringMap<size_t> by_content_;
  std::vector<TrieNode> trie_;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_ADDED_TOKENS_H_
