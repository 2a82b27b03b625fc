// UTF-8 helpers and the character classes the tokenizer needs, defined as JavaScript's
// Unicode regexes define them (the reference implementation is transformers.js).
// Stateless functions; thread-safe.
#ifndef KVTIER_TOKENIZER_UNICODE_H_
#define KVTIER_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvtier::tokenizer {

// Decodes the character at text[*pos] and advances *pos. text must be valid UTF-8.
inline char32_t NextChar(std::string_view text, size_t* pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = *pos;
  unsigned char c = s[i];
  if (c < 0x80) {
    *pos = i + 1;
    return c;
  }
  if (c < 0xE0) {
    *pos = i + 2;
    return ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
  }
  if (c < 0xF0) {
    *pos = i + 3;
    return ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
  }
  *pos = i + 4;
  return ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) |
         (s[i + 3] & 0x3F);
}

// Byte length of the UTF-8 character whose lead byte is c (1 for stray bytes).
inline size_t CharLength(unsigned char c) {
  return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

void AppendUtf8(char32_t cp, std::string* out);

// Whether text is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Decodes bytes the way the WHATWG TextDecoder does in replacement mode: each maximal
// invalid subpart becomes U+FFFD. With strip_bom, a leading U+FEFF is dropped
// (TextDecoder's default; ignoreBOM: true keeps it).
std::string DecodeUtf8Lossy(std::string_view bytes, bool strip_bom);

// \p{L}, \p{N} and JavaScript's \s (WhiteSpace + LineTerminator, which differs from ICU's
// White_Space on U+0085 and U+FEFF).
bool IsLetter(char32_t cp);
bool IsNumber(char32_t cp);
bool IsJsSpace(char32_t cp);
// Unicode's White_Space property (what llama.cpp's tokenizer means by \s).
bool IsUnicodeSpace(char32_t cp);
bool IsMark(char32_t cp);

// JavaScript's trimStart / trimEnd / trim (JS whitespace as above).
std::string_view TrimStartJs(std::string_view text);
std::string_view TrimEndJs(std::string_view text);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
absl::StatusOr<std::string> NormalizeUnicode(std::string_view text, NormalForm form);
// Locale-independent full lowercase mapping (JavaScript's toLowerCase).
std::string ToLowerUnicode(std::string_view text);

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_UNICODE_H_
