// SplitRegex: finds the matches of a pre-tokenizer regex the way JavaScript's
// String.matchAll does (or llama.cpp's tokenizer, which differs only in what \s means). The GPT-2, Llama-3 and Qwen2 patterns run on a hand-written matcher
// (fast, no allocation); any other pattern runs on ICU's regex engine with JavaScript's \s.
// Immutable after creation; thread-safe.
#ifndef KVTIER_TOKENIZER_SPLIT_REGEX_H_
#define KVTIER_TOKENIZER_SPLIT_REGEX_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::tokenizer {

// The GPT-2 pattern the ByteLevel pre-tokenizer uses when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The Split patterns of Llama-3's and Qwen2's tokenizer.json.
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// What \s means: JavaScript's WhiteSpace + LineTerminator (transformers.js, the reference
// of tokenizer.json files), or Unicode's White_Space (llama.cpp's tokenizer, the reference
// of GGUF files): they differ on U+0085 and U+FEFF.
enum class RegexSpaces { kJavaScript, kUnicode };

class SplitRegex {
 public:
  // A byte range [begin, end) of the text.
  using Match = std::pair<size_t, size_t>;

  virtual ~SplitRegex() = default;

  // pattern is the Regex string of a tokenizer.json. InvalidArgument if ICU rejects it.
  static absl::StatusOr<std::unique_ptr<SplitRegex>> Create(std::string_view pattern,
                                                            RegexSpaces spaces = RegexSpaces::kJavaScript);
  // Always the ICU engine (tests compare it with the hand-written matchers).
  static absl::StatusOr<std::unique_ptr<SplitRegex>> CreateIcu(std::string_view pattern,
                                                               RegexSpaces spaces = RegexSpaces::kJavaScript);

  // Appends the non-empty matches in text (valid UTF-8), left to right.
  virtual void FindAll(std::string_view text, std::vector<Match>* matches) const = 0;
  // Whether this instance is a hand-written matcher.
  virtual bool is_fast() const = 0;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_SPLIT_REGEX_H_
