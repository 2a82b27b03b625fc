// Normalizer types used by the supported tokenizer.json files.
#include "tokenizer/normalizer.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {
namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    for (const auto& part : parts_) {
      ASSIGN_OR_RETURN(text, part->Normalize(std::move(text)));
    }
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    return prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    return pattern_.ReplaceAll(text, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    return NormalizeUnicode(text, form_);
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    return ToLowerUnicode(text);
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    std::string_view view = text;
    if (left_) view = TrimStartJs(view);
    if (right_) view = TrimEndJs(view);
    return std::string(view);
  }

 private:
  bool left_, right_;
};

// Removes \p{M} (transformers.js's remove_accents).
class StripAccentsNormalizer final : public Normalizer {
 public:
  absl::StatusOr<std::string> Normalize(std::string text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
      size_t start = pos;
      char32_t cp = NextChar(text, &pos);
      if (!IsMark(cp)) out.append(text, start, pos - start);
    }
    return out;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const Json& config) {
  if (config.is_null()) return nullptr;
  ASSIGN_OR_RETURN(std::string type, StringField(config, "type", "normalizer"));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, ArrayField(config, "normalizers", "normalizer"));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> part, FromJson(item));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prefix, StringField(config, "prepend", "normalizer"));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(const Json* pattern_json, Field(config, "pattern", "normalizer"));
    if (pattern_json == nullptr) {
      return absl::InvalidArgumentError("tokenizer file: missing field 'normalizer.pattern'");
    }
    ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(*pattern_json, "normalizer"));
    ASSIGN_OR_RETURN(std::string content, StringField(config, "content", "normalizer"));
    return std::make_unique<ReplaceNormalizer>(std::move(pattern), std::move(content));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Strip") {
    ASSIGN_OR_RETURN(bool left, BoolField(config, "strip_left", "normalizer", false));
    ASSIGN_OR_RETURN(bool right, BoolField(config, "strip_right", "normalizer", false));
    return std::make_unique<StripNormalizer>(left, right);
  }
  return absl::UnimplementedError(absl::StrCat("tokenizer: unsupported normalizer type '", type, "'"));
}

}  // namespace kvtier::tokenizer
