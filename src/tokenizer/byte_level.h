// The GPT-2 byte <-> character table of byte-level BPE: every byte maps to one printable
// character, so any byte string is a string of vocabulary symbols. Immutable; thread-safe.
#ifndef KVTIER_TOKENIZER_BYTE_LEVEL_H_
#define KVTIER_TOKENIZER_BYTE_LEVEL_H_

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::tokenizer {

class ByteLevelTable {
 public:
  static const ByteLevelTable& Get();

  // Appends the characters of the bytes of text.
  void Encode(std::string_view text, std::string* out) const;
  // The byte a character stands for, if it is one of the 256.
  std::optional<unsigned char> ByteOf(char32_t cp) const {
    if (cp >= byte_of_.size() || byte_of_[cp] < 0) return std::nullopt;
    return static_cast<unsigned char>(byte_of_[cp]);
  }

 private:
  ByteLevelTable();

  std::array<std::string, 256> char_of_;  // UTF-8 of the character for each byte
  std::array<int, 324> byte_of_;          // code point -> byte, -1 where none
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_BYTE_LEVEL_H_
