// UTF-8 helpers and JavaScript-compatible character classes (ICU property lookups).
#include "tokenizer/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/bytestream.h>
#include <unicode/unistr.h>
#include <unicode/locid.h>

namespace kvtier::tokenizer {

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// One step of the WHATWG UTF-8 decoder. Returns the number of bytes of a valid character
// at s[i], or 0 with *consumed set to the length of the maximal invalid subpart.
size_t ValidCharAt(const unsigned char* s, size_t n, size_t i, size_t* consumed) {
  unsigned char c = s[i];
  if (c < 0x80) return 1;
  size_t needed;
  unsigned char lower = 0x80, upper = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    needed = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    needed = 2;
    if (c == 0xE0) lower = 0xA0;
    if (c == 0xED) upper = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    needed = 3;
    if (c == 0xF0) lower = 0x90;
    if (c == 0xF4) upper = 0x8F;
  } else {
    *consumed = 1;
    return 0;
  }
  size_t seen = 0;
  while (seen < needed) {
    size_t j = i + 1 + seen;
    if (j >= n || s[j] < lower || s[j] > upper) {
      *consumed = 1 + seen;
      return 0;
    }
    lower = 0x80;
    upper = 0xBF;
    ++seen;
  }
  return needed + 1;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    size_t consumed = 0;
    size_t len = ValidCharAt(s, n, i, &consumed);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string DecodeUtf8Lossy(std::string_view bytes, bool strip_bom) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  if (strip_bom && n >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF) i = 3;
  while (i < n) {
    if (s[i] < 0x80) {
      out.push_back(static_cast<char>(s[i++]));
      continue;
    }
    size_t consumed = 0;
    size_t len = ValidCharAt(s, n, i, &consumed);
    if (len > 0) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += consumed;
    }
  }
  return out;
}

bool IsLetter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return (U_GET_GC_MASK(cp) & U_GC_L_MASK) != 0;
}

bool IsNumber(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return (U_GET_GC_MASK(cp) & U_GC_N_MASK) != 0;
}

bool IsMark(char32_t cp) {
  if (cp < 0x80) return false;
  return (U_GET_GC_MASK(cp) & U_GC_M_MASK) != 0;
}

bool IsUnicodeSpace(char32_t cp) { return cp == 0x85 || (cp != 0xFEFF && IsJsSpace(cp)); }

bool IsJsSpace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view TrimStartJs(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsJsSpace(NextChar(text, &next))) break;
    pos = next;
  }
  return text.substr(pos);
}

std::string_view TrimEndJs(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!IsJsSpace(NextChar(text, &pos))) break;
    end = start;
  }
  return text.substr(0, end);
}

absl::StatusOr<std::string> NormalizeUnicode(std::string_view text, NormalForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case NormalForm::kNfc: normalizer = icu::Normalizer2::getNFCInstance(err); break;
    case NormalForm::kNfd: normalizer = icu::Normalizer2::getNFDInstance(err); break;
    case NormalForm::kNfkc: normalizer = icu::Normalizer2::getNFKCInstance(err); break;
    case NormalForm::kNfkd: normalizer = icu::Normalizer2::getNFKDInstance(err); break;
  }
  if (U_FAILURE(err)) return absl::InternalError("ICU normalizer unavailable");
  // Fast paths: ASCII and already-normalized text (the common case) need no copy through
  // UTF-16.
  bool ascii = true;
  for (unsigned char c : text) ascii = ascii && c < 0x80;
  if (ascii) return std::string(text);
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (normalizer->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, piece, sink, nullptr, err);
  if (U_FAILURE(err)) return absl::InvalidArgumentError("Unicode normalization failed");
  return out;
}

std::string ToLowerUnicode(std::string_view text) {
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  s.toLower(icu::Locale::getRoot());
  std::string out;
  s.toUTF8String(out);
  return out;
}

}  // namespace kvtier::tokenizer
