// StreamDecoder: incremental detokenization by window diffs.
#include "tokenizer/stream_decoder.h"

#include "common/status_macros.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr size_t kContextTokens = 5;

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && std::string_view(s).substr(s.size() - 3) == kReplacement;
}

// The largest n <= limit with s[0..n) ending on a character boundary.
size_t BoundaryAtOrBefore(const std::string& s, size_t limit) {
  while (limit > 0 && limit < s.size() && (static_cast<unsigned char>(s[limit]) & 0xC0) == 0x80) --limit;
  return limit;
}

// The largest p <= text.size() on a character boundary such that no clean-up rule can match
// across p: rules are ASCII, start with a space and are at most 4 bytes long, and only ever
// delete a space, so p is safe when no space lies in the 3 bytes before it, or when a space
// starts at p after a character other than a space or a quote (no rule continues over it).
size_t SafeCleanUpSplit(const std::string& text) {
  for (size_t p = text.size(); p > 0; --p) {
    if (p < text.size() && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) continue;
    size_t from = p >= 3 ? p - 3 : 0;
    if (text.find(' ', from) >= p) return p;
    if (p < text.size() && text[p] == ' ' && text[p - 1] != ' ' && text[p - 1] != '\'') return p;
  }
  return 0;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer* tokenizer, DecodeOptions options,
                             absl::Span<const int32_t> context)
    : tokenizer_(tokenizer), options_(options), ids_(context.begin(), context.end()) {
  clean_up_ = options.clean_up_tokenization_spaces.value_or(tokenizer->config().clean_up_tokenization_spaces);
  options_.clean_up_tokenization_spaces = false;
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kContextTokens ? ids_.size() - kContextTokens : 0;
}

absl::StatusOr<std::string> StreamDecoder::Add(int32_t id) {
  ASSIGN_OR_RETURN(std::string raw, AddRaw(id));
  return CleanUp(std::move(raw), /*final=*/false);
}

absl::StatusOr<std::string> StreamDecoder::Flush() {
  ASSIGN_OR_RETURN(std::string raw, FlushRaw());
  return CleanUp(std::move(raw), /*final=*/true);
}

std::string StreamDecoder::CleanUp(std::string raw, bool final) {
  if (!clean_up_) return raw;
  pending_ += raw;
  size_t split = final ? pending_.size() : SafeCleanUpSplit(pending_);
  std::string out = CleanUpTokenizationSpaces(pending_.substr(0, split));
  pending_.erase(0, split);
  return out;
}

absl::StatusOr<std::string> StreamDecoder::AddRaw(int32_t id) {
  ids_.push_back(id);
  absl::Span<const int32_t> all(ids_);
  ASSIGN_OR_RETURN(std::string prefix_text,
                   tokenizer_->Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), options_));
  ASSIGN_OR_RETURN(std::string new_text, tokenizer_->Decode(all.subspan(prefix_offset_), options_));
  if (new_text.size() <= prefix_text.size() || EndsWithReplacement(new_text)) {
    // Nothing new yet (e.g. a skipped special token), or the last character is incomplete.
    return std::string();
  }
  std::string piece = new_text.substr(BoundaryAtOrBefore(new_text, prefix_text.size()));
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return piece;
}

absl::StatusOr<std::string> StreamDecoder::FlushRaw() {
  if (read_offset_ == ids_.size()) return std::string();
  absl::Span<const int32_t> all(ids_);
  ASSIGN_OR_RETURN(std::string prefix_text,
                   tokenizer_->Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), options_));
  ASSIGN_OR_RETURN(std::string new_text, tokenizer_->Decode(all.subspan(prefix_offset_), options_));
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return std::string();
  return new_text.substr(BoundaryAtOrBefore(new_text, prefix_text.size()));
}

}  // namespace kvtier::tokenizer
