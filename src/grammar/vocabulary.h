// Vocabulary: what each token id adds to the text, as bytes, and a byte trie over the
// text tokens — the token-level side of grammar matching. Ids that add no text (special
// tokens, ids the tokenizer does not define) are never allowed by a grammar; the matcher
// allows end tokens (eos) by id instead. Built once per tokenizer; immutable; thread-safe.
#ifndef KVTIER_GRAMMAR_VOCABULARY_H_
#define KVTIER_GRAMMAR_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/byte_trie.h"

namespace kvtier::grammar {

class Vocabulary {
 public:
  // token_bytes[id]: the bytes id adds to decoded text; nullopt or empty for ids that add
  // none. Its size is the number of ids (the model's vocabulary, which may exceed the
  // tokenizer's).
  static std::shared_ptr<const Vocabulary> Create(std::vector<std::optional<std::string>> token_bytes);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  // 32-bit words of an allowed-token bitmask: ceil(size / 32).
  int32_t num_words() const { return (size() + 31) / 32; }
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_text(int32_t id) const { return !bytes_[static_cast<size_t>(id)].empty(); }
  int32_t num_text_tokens() const { return static_cast<int32_t>(trie_.ids().size()); }
  // Identifies the ids and their bytes (FNV-1a over both): the tokenizer side of the
  // compile cache's key.
  uint64_t fingerprint() const { return fingerprint_; }
  // The text tokens by their bytes.
  const ByteTrie& trie() const { return trie_; }

 private:
  Vocabulary() = default;

  std::vector<std::string> bytes_;
  ByteTrie trie_;
  uint64_t fingerprint_ = 0;
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_VOCABULARY_H_
