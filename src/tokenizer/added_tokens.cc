// AddedTokens: loading and splitting text at added tokens.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {

absl::StatusOr<AddedTokens> AddedTokens::FromJson(const Json& json) {
  AddedTokens added;
  added.trie_.emplace_back();
  if (json.is_null()) return added;
  if (!json.is_array()) return absl::InvalidArgumentError("tokenizer file: field 'added_tokens' must be an array");
  for (const Json& item : json) {
    constexpr std::string_view kWhere = "added_tokens[]";
    AddedToken t;
    ASSIGN_OR_RETURN(t.content, StringField(item, "content", kWhere));
    ASSIGN_OR_RETURN(int64_t id, IntField(item, "id", kWhere, -1));
    if (id < 0 || id > INT32_MAX - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer file: field 'added_tokens[].id' missing or bad for '", t.content, "'"));
    }
    if (t.content.empty()) {
      return absl::InvalidArgumentError("tokenizer file: field 'added_tokens[].content' is empty");
    }
    t.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(t.special, BoolField(item, "special", kWhere, false));
    ASSIGN_OR_RETURN(t.lstrip, BoolField(item, "lstrip", kWhere, false));
    ASSIGN_OR_RETURN(t.rstrip, BoolField(item, "rstrip", kWhere, false));
    ASSIGN_OR_RETURN(t.single_word, BoolField(item, "single_word", kWhere, false));
    ASSIGN_OR_RETURN(t.normalized, BoolField(item, "normalized", kWhere, false));
    size_t index = added.tokens_.size();
    // A repeated content keeps its last definition, as the reference's Map does.
    added.by_content_[t.content] = index;
    int32_t node = 0;
    for (unsigned char c : t.content) {
      int32_t next = added.Child(node, c);
      if (next < 0) {
        next = static_cast<int32_t>(added.trie_.size());
        auto& children = added.trie_[node].children;
        children.insert(std::upper_bound(children.begin(), children.end(), std::make_pair(c, INT32_MIN),
                                         [](const auto& a, const auto& b) { return a.first < b.first; }),
                        {c, next});
        added.trie_.emplace_back();
      }
      node = next;
    }
    added.trie_[node].token = static_cast<int32_t>(index);
    added.tokens_.push_back(std::move(t));
  }
  return added;
}

int32_t AddedTokens::Child(int32_t node, unsigned char byte) const {
  const auto& children = trie_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), byte,
                             [](const auto& a, unsigned char b) { return a.first < b; });
  return it != children.end() && it->first == byte ? it->second : -1;
}

const AddedToken* AddedTokens::Find(std::string_view text) const {
  auto it = by_content_.find(text);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedTokens::Split(std::string_view text, bool include_special,
                        std::vector<Section>* sections) const {
  sections->clear();
  size_t start = 0;
  if (tokens_.empty()) {
    if (!text.empty()) sections->push_back(Section{text, std::nullopt});
    return;
  }
  for (size_t i = 0; i < text.size();) {
    // Longest added token starting at i.
    int32_t node = 0;
    int32_t match = -1;
    size_t match_len = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = Child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      int32_t t = trie_[node].token;
      if (t >= 0 && (include_special || !tokens_[t].special)) {
        match = t;
        match_len = j + 1 - i;
      }
    }
    if (match < 0) {
      i += CharLength(static_cast<unsigned char>(text[i]));
      continue;
    }
    if (i > start) sections->push_back(Section{text.substr(start, i - start), std::nullopt});
    sections->push_back(Section{text.substr(i, match_len), static_cast<size_t>(match)});
    i += match_len;
    start = i;
  }
  if (start < text.size()) sections->push_back(Section{text.substr(start), std::nullopt});

  for (size_t k = 0; k < sections->size(); ++k) {
    const Section& s = (*sections)[k];
    if (!s.token_index.has_value()) continue;
    const AddedToken& t = tokens_[*s.token_index];
    if (t.lstrip && k > 0 && !(*sections)[k - 1].token_index.has_value()) {
      (*sections)[k - 1].text = TrimEndJs((*sections)[k - 1].text);
    }
    if (t.rstrip && k + 1 < sections->size() && !(*sections)[k + 1].token_index.has_value()) {
      (*sections)[k + 1].text = TrimStartJs((*sections)[k + 1].text);
    }
  }
}

}  // namespace kvtier::tokenizer
