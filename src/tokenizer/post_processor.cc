// Post-processor types used by the supported tokenizer.json files.
#include "tokenizer/post_processor.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::tokenizer {
namespace {

// The "single" template: special token ids around the sequence ($A).
class TemplatePostProcessor final : public PostProcessor {
 public:
  struct Item {
    std::optional<int32_t> special;  // nullopt: the sequence itself
  };
  explicit TemplatePostProcessor(std::vector<Item> items) : items_(std::move(items)) {}

  std::vector<int32_t> Process(std::vector<int32_t> ids, bool add_special_tokens) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + items_.size());
    for (const Item& item : items_) {
      if (item.special.has_value()) {
        if (add_special_tokens) out.push_back(*item.special);
      } else {
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
    return out;
  }

 private:
  std::vector<Item> items_;
};

class IdentityPostProcessor final : public PostProcessor {
 public:
  std::vector<int32_t> Process(std::vector<int32_t> ids, bool) const override { return ids; }
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  std::vector<int32_t> Process(std::vector<int32_t> ids, bool add_special_tokens) const override {
    for (const auto& part : parts_) ids = part->Process(std::move(ids), add_special_tokens);
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

absl::StatusOr<std::unique_ptr<PostProcessor>> MakeTemplate(const Json& config,
                                                            const PostProcessor::TokenLookup& lookup) {
  constexpr std::string_view kWhere = "post_processor";
  ASSIGN_OR_RETURN(const Json* single, ArrayField(config, "single", kWhere));
  ASSIGN_OR_RETURN(const Json* specials, Field(config, "special_tokens", kWhere));
  std::vector<TemplatePostProcessor::Item> items;
  for (const Json& item : *single) {
    if (!item.is_object()) {
      return absl::InvalidArgumentError("tokenizer file: field 'post_processor.single[]' must hold objects");
    }
    if (item.contains("Sequence")) {
      items.push_back({std::nullopt});
      continue;
    }
    auto special = item.find("SpecialToken");
    if (special == item.end()) {
      return absl::InvalidArgumentError(
          "tokenizer file: field 'post_processor.single[]' needs 'Sequence' or 'SpecialToken'");
    }
    ASSIGN_OR_RETURN(std::string name, StringField(*special, "id", "post_processor.single[].SpecialToken"));
    std::optional<int32_t> id = lookup(name);
    if (!id.has_value() && specials != nullptr && specials->is_object()) {
      auto entry = specials->find(name);
      if (entry != specials->end() && entry->is_object()) {
        auto ids = entry->find("ids");
        if (ids != entry->end() && ids->is_array() && ids->size() == 1 && (*ids)[0].is_number_integer()) {
          id = (*ids)[0].get<int32_t>();
        }
      }
    }
    if (!id.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer file: field 'post_processor.single[].SpecialToken.id' names unknown token '", name, "'"));
    }
    items.push_back({id});
  }
  return std::make_unique<TemplatePostProcessor>(std::move(items));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessor::FromJson(const Json& config,
                                                                       const TokenLookup& lookup) {
  if (config.is_null()) return nullptr;
  constexpr std::string_view kWhere = "post_processor";
  ASSIGN_OR_RETURN(std::string type, StringField(config, "type", kWhere));
  if (type == "TemplateProcessing") return MakeTemplate(config, lookup);
  if (type == "ByteLevel") return std::make_unique<IdentityPostProcessor>();
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, ArrayField(config, "processors", kWhere));
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<PostProcessor> part, FromJson(item, lookup));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePostProcessor>(std::move(parts));
  }
  return absl::UnimplementedError(absl::StrCat("tokenizer: unsupported post_processor type '", type, "'"));
}

}  // namespace kvtier::tokenizer
