// The GPT-2 bytes_to_unicode table.
#include "tokenizer/byte_level.h"

#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {

const ByteLevelTable& ByteLevelTable::Get() {
  static const auto* table = new ByteLevelTable();
  return *table;
}

ByteLevelTable::ByteLevelTable() {
  byte_of_.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
    AppendUtf8(cp, &char_of_[b]);
    byte_of_[cp] = b;
  }
}

void ByteLevelTable::Encode(std::string_view text, std::string* out) const {
  for (unsigned char c : text) out->append(char_of_[c]);
}

}  // namespace kvtier::tokenizer
