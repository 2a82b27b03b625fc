// Pattern: literal or regex matching for tokenizer.json parts.
#include "tokenizer/pattern.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/strings.h"

namespace kvtier::tokenizer {

absl::StatusOr<Pattern> Pattern::FromJson(const Json& pattern, std::string_view where) {
  Pattern p;
  std::string field = absl::StrCat(Av(where), ".pattern");
  ASSIGN_OR_RETURN(std::optional<std::string> literal, OptStringField(pattern, "String", field));
  ASSIGN_OR_RETURN(std::optional<std::string> regex, OptStringField(pattern, "Regex", field));
  if (literal.has_value()) {
    p.literal_ = *std::move(literal);
  } else if (regex.has_value()) {
    ASSIGN_OR_RETURN(p.regex_, SplitRegex::Create(*regex));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer file: field '", field, "' needs 'String' or 'Regex'"));
  }
  return p;
}

void Pattern::FindAll(std::string_view text, std::vector<SplitRegex::Match>* matches) const {
  if (regex_ != nullptr) {
    regex_->FindAll(text, matches);
    return;
  }
  if (literal_.empty()) return;
  for (size_t pos = text.find(literal_); pos != std::string_view::npos;
       pos = text.find(literal_, pos + literal_.size())) {
    matches->emplace_back(pos, pos + literal_.size());
  }
}

std::string Pattern::ReplaceAll(std::string_view text, std::string_view content) const {
  std::vector<SplitRegex::Match> matches;
  FindAll(text, &matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(prev, begin - prev));
    out.append(content);
    prev = end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace kvtier::tokenizer
