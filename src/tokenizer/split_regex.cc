// SplitRegex: hand-written matchers for the known GPT-2 / Llama-3 / Qwen2 patterns and an
// ICU fallback for the rest.
#include "tokenizer/split_regex.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>


#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tokenizer/strings.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {
namespace {

// The three patterns differ only in these knobs.
struct FastPatternSpec {
  bool contractions_ignore_case;  // (?i:'s|...) instead of 's|...
  bool letters_any_prefix;        // [^\r\n\p{L}\p{N}]?\p{L}+ instead of ' ?\p{L}+'
  int max_digits;                 // \p{N}{1,max}; 0: ' ?\p{N}+'
  bool newline_alternatives;      // [\r\n]* after punctuation, and \s*[\r\n]+
};

// Per-character class, looked up once per character.
enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

class FastSplitRegex final : public SplitRegex {
 public:
  FastSplitRegex(FastPatternSpec spec, RegexSpaces spaces) : spec_(spec), spaces_(spaces) {}

  void FindAll(std::string_view text, std::vector<Match>* matches) const override {
    // Decode once into per-thread buffers: code points, their classes, byte offsets.
    thread_local std::vector<char32_t> cps;
    thread_local std::vector<uint8_t> classes;
    thread_local std::vector<uint32_t> offsets;
    cps.clear();
    classes.clear();
    offsets.clear();
    for (size_t pos = 0; pos < text.size();) {
      offsets.push_back(static_cast<uint32_t>(pos));
      char32_t cp = NextChar(text, &pos);
      cps.push_back(cp);
      const bool space = spaces_ == RegexSpaces::kJavaScript ? IsJsSpace(cp) : IsUnicodeSpace(cp);
      classes.push_back(IsLetter(cp) ? kLetter : IsNumber(cp) ? kNumber : space ? kSpace : kOther);
    }
    offsets.push_back(static_cast<uint32_t>(text.size()));
    const size_t n = cps.size();
    for (size_t i = 0; i < n;) {
      size_t end = MatchAt(cps.data(), classes.data(), i, n);
      matches->emplace_back(offsets[i], offsets[end]);
      i = end;
    }
  }

  bool is_fast() const override { return true; }

 private:
  static bool IsNewline(char32_t c) { return c == '\r' || c == '\n'; }

  // End (exclusive, in characters) of the match at i. The alternatives are tried in the
  // pattern's order; with backtracking worked out by hand, every position matches.
  size_t MatchAt(const char32_t* cp, const uint8_t* cls, size_t i, size_t n) const {
    // 1. Contractions.
    if (cp[i] == '\'' && i + 1 < n) {
      char32_t a = cp[i + 1];
      char32_t b = i + 2 < n ? cp[i + 2] : 0;
      if (spec_.contractions_ignore_case) {
        if (a >= 'A' && a <= 'Z') a |= 0x20;
        if (b >= 'A' && b <= 'Z') b |= 0x20;
      }
      if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    // 2. Letters, with an optional prefix character.
    {
      size_t j = i;
      if (spec_.letters_any_prefix) {
        if (cls[i] != kLetter && cls[i] != kNumber && !IsNewline(cp[i]) && i + 1 < n &&
            cls[i + 1] == kLetter) {
          j = i + 1;
        }
      } else if (cp[i] == ' ' && i + 1 < n && cls[i + 1] == kLetter) {
        j = i + 1;
      }
      if (cls[j] == kLetter) {
        while (j < n && cls[j] == kLetter) ++j;
        return j;
      }
    }
    // 3. Numbers.
    if (spec_.max_digits > 0) {
      if (cls[i] == kNumber) {
        size_t j = i;
        while (j < n && cls[j] == kNumber && j - i < static_cast<size_t>(spec_.max_digits)) ++j;
        return j;
      }
    } else {
      size_t j = (cp[i] == ' ' && i + 1 < n && cls[i + 1] == kNumber) ? i + 1 : i;
      if (cls[j] == kNumber) {
        while (j < n && cls[j] == kNumber) ++j;
        return j;
      }
    }
    // 4. Other characters, optionally after a space (and, in newer patterns, newlines after).
    {
      size_t j = (cp[i] == ' ' && i + 1 < n && cls[i + 1] == kOther) ? i + 1 : i;
      if (cls[j] == kOther) {
        while (j < n && cls[j] == kOther) ++j;
        if (spec_.newline_alternatives) {
          while (j < n && IsNewline(cp[j])) ++j;
        }
        return j;
      }
    }
    // Only whitespace is left: cls[i] == kSpace.
    size_t run_end = i;
    while (run_end < n && cls[run_end] == kSpace) ++run_end;
    // 5. \s*[\r\n]+ : through the last newline of the whitespace run.
    if (spec_.newline_alternatives) {
      for (size_t k = run_end; k > i; --k) {
        if (IsNewline(cp[k - 1])) return k;
      }
    }
    // 6. \s+(?!\S) : the run, less its last character when a non-space follows.
    if (run_end == n) return run_end;
    if (run_end - i >= 2) return run_end - 1;
    // 7. \s+
    return run_end;
  }

  FastPatternSpec spec_;
  RegexSpaces spaces_;
};

// JavaScript's \s as an ICU set (ICU's own \s is White_Space: +U+0085, -U+FEFF).
constexpr std::string_view kJsSpaceSet =
    R"([\t-\r\x{20}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}])";
constexpr std::string_view kJsNonSpaceSet =
    R"([^\t-\r\x{20}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}])";

// Rewrites a tokenizer.json pattern as transformers.js does before compiling it, and makes
// \s / \S mean what they mean in JavaScript (ICU's own are Unicode's White_Space).
std::string ToIcuPattern(std::string_view pattern, RegexSpaces spaces) {
  std::string p = absl::StrReplaceAll(
      Av(pattern), {{"(?i:'s|'t|'re|'ve|'m|'ll|'d)",
                 "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"},
                {"\\#", "#"}, {"\\&", "&"}, {"\\~", "~"}});
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      char next = p[i + 1];
      if (next == 's' && spaces == RegexSpaces::kJavaScript) {
        out.append(kJsSpaceSet);
      } else if (next == 'S' && spaces == RegexSpaces::kJavaScript) {
        out.append(kJsNonSpaceSet);
      } else {
        out.push_back(p[i]);
        out.push_back(next);
      }
      ++i;
    } else {
      out.push_back(p[i]);
    }
  }
  return out;
}

class IcuSplitRegex final : public SplitRegex {
 public:
  explicit IcuSplitRegex(std::unique_ptr<icu::RegexPattern> pattern)
      : pattern_(std::move(pattern)) {}

  void FindAll(std::string_view text, std::vector<Match>* matches) const override {
    icu::UnicodeString input = icu::UnicodeString::fromUTF8(
        icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    // UTF-16 index -> byte offset.
    std::vector<uint32_t> byte_at(static_cast<size_t>(input.length()) + 1, 0);
    {
      size_t pos = 0;
      int32_t u = 0;
      while (pos < text.size()) {
        byte_at[u] = static_cast<uint32_t>(pos);
        char32_t cp = NextChar(text, &pos);
        u += cp >= 0x10000 ? 2 : 1;
        if (cp >= 0x10000) byte_at[u - 1] = static_cast<uint32_t>(pos);
      }
      byte_at[u] = static_cast<uint32_t>(text.size());
    }
    UErrorCode err = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(input, err));
    if (U_FAILURE(err)) return;
    while (matcher->find(err) && U_SUCCESS(err)) {
      int32_t begin = matcher->start(err);
      int32_t end = matcher->end(err);
      if (end > begin) matches->emplace_back(byte_at[begin], byte_at[end]);
    }
  }

  bool is_fast() const override { return false; }

 private:
  std::unique_ptr<icu::RegexPattern> pattern_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SplitRegex>> SplitRegex::CreateIcu(std::string_view pattern, RegexSpaces spaces) {
  std::string icu_pattern = ToIcuPattern(pattern, spaces);
  UErrorCode err = U_ZERO_ERROR;
  UParseError parse_error;
  std::unique_ptr<icu::RegexPattern> compiled(icu::RegexPattern::compile(
      icu::UnicodeString::fromUTF8(icu_pattern), 0, parse_error, err));
  if (U_FAILURE(err)) {
    return absl::InvalidArgumentError(absl::StrCat("pre_tokenizer pattern: cannot compile regex '",
                                                   Av(pattern), "': ", u_errorName(err)));
  }
  return std::unique_ptr<SplitRegex>(new IcuSplitRegex(std::move(compiled)));
}

absl::StatusOr<std::unique_ptr<SplitRegex>> SplitRegex::Create(std::string_view pattern, RegexSpaces spaces) {
  if (pattern == kGpt2Pattern) {
    return std::unique_ptr<SplitRegex>(new FastSplitRegex({false, false, 0, false}, spaces));
  }
  if (pattern == kLlama3Pattern) {
    return std::unique_ptr<SplitRegex>(new FastSplitRegex({true, true, 3, true}, spaces));
  }
  if (pattern == kQwen2Pattern) {
    return std::unique_ptr<SplitRegex>(new FastSplitRegex({true, true, 1, true}, spaces));
  }
  return CreateIcu(pattern, spaces);
}

}  // namespace kvtier::tokenizer
