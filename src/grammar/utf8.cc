// UTF-8 decoding, encoding and range splitting (utf8.h).
#include "grammar/utf8.h"

namespace kvtier::grammar {
namespace {

int EncodedLength(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

// The encoding of c into bytes[0..n).
void Encode(char32_t c, uint8_t* bytes, int* n) {
  *n = EncodedLength(c);
  switch (*n) {
    case 1:
      bytes[0] = static_cast<uint8_t>(c);
      break;
    case 2:
      bytes[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
      bytes[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    case 3:
      bytes[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
      bytes[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      bytes[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    default:
      bytes[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
      bytes[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
      bytes[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      bytes[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
  }
}

}  // namespace

char32_t DecodeUtf8At(std::string_view text, size_t* pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(*pos);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || *pos + static_cast<size_t>(n) > text.size()) {
    ++*pos;
    return b0;
  }
  char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int i = 1; i < n; ++i) {
    const uint8_t b = byte(*pos + static_cast<size_t>(i));
    if ((b & 0xC0) != 0x80) {
      ++*pos;
      return b0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  if (EncodedLength(c) != n || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    ++*pos;
    return b0;
  }
  *pos += static_cast<size_t>(n);
  return c;
}

bool IsValidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t before = pos;
    const char32_t c = DecodeUtf8At(text, &pos);
    // A malformed byte comes back alone as itself: valid only if it is ASCII.
    if (pos == before + 1 && c >= 0x80) return false;
  }
  return true;
}

void AppendUtf8(char32_t c, std::string* out) {
  uint8_t bytes[4];
  int n = 0;
  Encode(c, bytes, &n);
  out->append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

void Utf8Sequences(char32_t lo, char32_t hi, std::vector<Utf8Sequence>* out) {
  if (lo > hi) return;
  // Split at the encoded-length boundaries first.
  for (char32_t boundary : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (lo <= boundary && hi > boundary) {
      Utf8Sequences(lo, boundary, out);
      Utf8Sequences(boundary + 1, hi, out);
      return;
    }
  }
  // Then until every continuation byte position spans a whole 0x80-0xBF block or a prefix
  // shared by lo and hi, so the byte ranges combine freely.
  for (int i = 1; i < 4; ++i) {
    const char32_t mask = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        Utf8Sequences(lo, lo | mask, out);
        Utf8Sequences((lo | mask) + 1, hi, out);
        return;
      }
      if ((hi & mask) != mask) {
        Utf8Sequences(lo, (hi & ~mask) - 1, out);
        Utf8Sequences(hi & ~mask, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  int n = 0, m = 0;
  Encode(lo, a, &n);
  Encode(hi, b, &m);
  Utf8Sequence seq(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) seq[static_cast<size_t>(i)] = {a[i], b[i]};
  out->push_back(std::move(seq));
}

}  // namespace kvtier::grammar
