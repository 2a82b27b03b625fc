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

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer* tokenizer, DecodeOptions options,
                             absl::Span<const int32_t> context)
    : tokenizer_(tokenizer), options_(options), ids_(context.begin(), context.end()) {
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kContextTokens ? ids_.size() - kContextTokens : 0;
}

absl::StatusOr<std::string> StreamDecoder::Add(int32_t id) {
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

absl::StatusOr<std::string> StreamDecoder::Flush() {
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
