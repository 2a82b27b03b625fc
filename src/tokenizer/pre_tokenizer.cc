// Pre-tokenizer types used by the supported tokenizer.json files.
#include "tokenizer/pre_tokenizer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/split_regex.h"

namespace kvtier::tokenizer {
namespace {

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<std::string>* pieces, int section_index) const override {
    for (const auto& part : parts_) part->PreTokenize(pieces, section_index);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// Splits each piece at the pattern's matches: keeps matches and the text between them
// (Isolated), or only the text between them (Removed), or only the matches (invert).
class SplitPreTokenizer final : public PreTokenizer {
 public:
  enum class Mode { kIsolated, kRemoved, kMatchesOnly };
  SplitPreTokenizer(Pattern pattern, Mode mode) : pattern_(std::move(pattern)), mode_(mode) {}

  void PreTokenize(std::vector<std::string>* pieces, int section_index) const override {
    std::vector<std::string> out;
    std::vector<SplitRegex::Match> matches;
    for (const std::string& piece : *pieces) {
      matches.clear();
      pattern_.FindAll(piece, &matches);
      size_t prev = 0;
      for (const auto& [begin, end] : matches) {
        if (mode_ != Mode::kMatchesOnly && begin > prev) out.push_back(piece.substr(prev, begin - prev));
        if (mode_ != Mode::kRemoved) out.push_back(piece.substr(begin, end - begin));
        prev = end;
      }
      if (mode_ != Mode::kMatchesOnly && prev < piece.size()) out.push_back(piece.substr(prev));
    }
    pieces->swap(out);
  }

 private:
  Pattern pattern_;
  Mode mode_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<SplitRegex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void PreTokenize(std::vector<std::string>* pieces, int section_index) const override {
    const ByteLevelTable& table = ByteLevelTable::Get();
    std::vector<std::string> out;
    out.reserve(pieces->size());
    std::vector<SplitRegex::Match> matches;
    for (std::string& piece : *pieces) {
      if (add_prefix_space_ && !absl::StartsWith(piece, " ")) piece.insert(0, " ");
      if (regex_ == nullptr) {
        std::string mapped;
        table.Encode(piece, &mapped);
        out.push_back(std::move(mapped));
        continue;
      }
      matches.clear();
      regex_->FindAll(piece, &matches);
      for (const auto& [begin, end] : matches) {
        std::string mapped;
        table.Encode(std::string_view(piece).substr(begin, end - begin), &mapped);
        out.push_back(std::move(mapped));
      }
    }
    pieces->swap(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitRegex> regex_;  // null when use_regex is false
};

// Replaces spaces by the replacement character and prepends one; does not split (as
// transformers.js).
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, bool add_prefix_space, bool first_only)
      : replacement_(std::move(replacement)), add_prefix_space_(add_prefix_space),
        first_only_(first_only) {}

  void PreTokenize(std::vector<std::string>* pieces, int section_index) const override {
    for (std::string& piece : *pieces) {
      piece = absl::StrReplaceAll(piece, {{" ", replacement_}});
      if (add_prefix_space_ && !absl::StartsWith(piece, replacement_) &&
          (!first_only_ || section_index == 0)) {
        piece.insert(0, replacement_);
      }
    }
  }

 private:
  std::string replacement_;
  bool add_prefix_space_;
  bool first_only_;
};

}  // namespace

std::unique_ptr<PreTokenizer> PreTokenizer::MakeMetaspace(std::string replacement,
                                                          bool add_prefix_space,
                                                          bool prepend_first_only) {
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), add_prefix_space,
                                                 prepend_first_only);
}

std::unique_ptr<PreTokenizer> PreTokenizer::MakeByteLevel(std::unique_ptr<SplitRegex> regex) {
  return std::make_unique<ByteLevelPreTokenizer>(false, std::move(regex));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& config) {
  if (config.is_null()) return nullptr;
  constexpr std::string_view kWhere = "pre_tokenizer";
  ASSIGN_OR_RETURN(std::string type, StringField(config, "type", kWhere));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, ArrayField(config, "pretokenizers", kWhere));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> part, FromJson(item));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(const Json* pattern_json, Field(config, "pattern", kWhere));
    if (pattern_json == nullptr) {
      return absl::InvalidArgumentError("tokenizer file: missing field 'pre_tokenizer.pattern'");
    }
    ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(*pattern_json, kWhere));
    ASSIGN_OR_RETURN(bool invert, BoolField(config, "invert", kWhere, false));
    ASSIGN_OR_RETURN(std::string behavior, StringField(config, "behavior", kWhere));
    SplitPreTokenizer::Mode mode;
    if (invert) {
      mode = SplitPreTokenizer::Mode::kMatchesOnly;
    } else if (behavior == "Isolated") {
      mode = SplitPreTokenizer::Mode::kIsolated;
    } else if (behavior == "Removed") {
      mode = SplitPreTokenizer::Mode::kRemoved;
    } else {
      return absl::UnimplementedError(
          absl::StrCat("tokenizer: unsupported Split pre_tokenizer behavior '", behavior, "'"));
    }
    return std::make_unique<SplitPreTokenizer>(std::move(pattern), mode);
  }
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(bool add_prefix_space, BoolField(config, "add_prefix_space", kWhere, false));
    ASSIGN_OR_RETURN(bool use_regex, BoolField(config, "use_regex", kWhere, true));
    std::unique_ptr<SplitRegex> regex;
    if (use_regex) {
      ASSIGN_OR_RETURN(regex, SplitRegex::Create(kGpt2Pattern));
    }
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, StringField(config, "replacement", kWhere));
    ASSIGN_OR_RETURN(std::optional<std::string> str_rep, OptStringField(config, "str_rep", kWhere));
    ASSIGN_OR_RETURN(std::optional<std::string> scheme,
                     OptStringField(config, "prepend_scheme", kWhere));
    std::string prepend_scheme = scheme.value_or("always");
    if (prepend_scheme != "always" && prepend_scheme != "first" && prepend_scheme != "never") {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer file: field 'pre_tokenizer.prepend_scheme' has unknown value '", prepend_scheme, "'"));
    }
    // Files written by tokenizers >= 0.14 drop add_prefix_space in favour of prepend_scheme.
    ASSIGN_OR_RETURN(bool add_prefix_space, BoolField(config, "add_prefix_space", kWhere,
                                                      prepend_scheme != "never"));
    if (prepend_scheme == "never") add_prefix_space = false;
    return MakeMetaspace(str_rep.value_or(replacement), add_prefix_space, prepend_scheme == "first");
  }
  return absl::UnimplementedError(absl::StrCat("tokenizer: unsupported pre_tokenizer type '", type, "'"));
}

}  // namespace kvtier::tokenizer
