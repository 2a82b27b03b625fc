// UTF-8 for the grammar compiler: decoding code points out of literal text, encoding them,
// and splitting a code-point range into the byte-range sequences that encode exactly its
// members (so a character class becomes a small byte automaton). Stateless; thread-safe.
#ifndef KVTIER_GRAMMAR_UTF8_H_
#define KVTIER_GRAMMAR_UTF8_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::grammar {

// The code point starting at *pos (advanced past it). Malformed input yields each byte as
// its own code point (text from our parsers is always well-formed; this keeps it total).
char32_t DecodeUtf8At(std::string_view text, size_t* pos);
// Whether text is well-formed UTF-8 of scalar values (no surrogates, no overlongs).
bool IsValidUtf8(std::string_view text);
void AppendUtf8(char32_t c, std::string* out);

struct ByteRange {
  uint8_t lo = 0;
  uint8_t hi = 0;
};
// One encoded length's worth of a range: byte i of a member lies in ranges[i].
using Utf8Sequence = std::vector<ByteRange>;

// Sequences whose byte strings are exactly the UTF-8 encodings of [lo, hi] (lo <= hi,
// no surrogates inside), in increasing code-point order.
void Utf8Sequences(char32_t lo, char32_t hi, std::vector<Utf8Sequence>* out);

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_UTF8_H_
