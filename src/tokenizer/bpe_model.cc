// BpeModel: loading and the merge loop.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tokenizer/strings.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model) {
  constexpr std::string_view kWhere = "model";
  if (!model.is_object()) return absl::InvalidArgumentError("tokenizer file: 'model' must be an object");
  ASSIGN_OR_RETURN(std::optional<std::string> type, OptStringField(model, "type", kWhere));
  if (type.has_value() && *type != "BPE") {
    return absl::UnimplementedError(absl::StrCat("tokenizer: unsupported model type '", *type, "'"));
  }
  ASSIGN_OR_RETURN(const Json* vocab, Field(model, "vocab", kWhere));
  if (vocab == nullptr || !vocab->is_object()) {
    return absl::InvalidArgumentError("tokenizer file: field 'model.vocab' must be an object");
  }
  ASSIGN_OR_RETURN(const Json* merges, ArrayField(model, "merges", kWhere));
  std::unique_ptr<BpeModel> m(new BpeModel());
  ASSIGN_OR_RETURN(m->fuse_unk_, BoolField(model, "fuse_unk", kWhere, false));
  ASSIGN_OR_RETURN(m->byte_fallback_, BoolField(model, "byte_fallback", kWhere, false));
  ASSIGN_OR_RETURN(m->ignore_merges_, BoolField(model, "ignore_merges", kWhere, false));
  ASSIGN_OR_RETURN(std::optional<std::string> suffix, OptStringField(model, "end_of_word_suffix", kWhere));
  m->end_of_word_suffix_ = suffix.value_or("");
  ASSIGN_OR_RETURN(std::optional<std::string> prefix,
                   OptStringField(model, "continuing_subword_prefix", kWhere));
  if (prefix.has_value() && !prefix->empty()) {
    return absl::UnimplementedError("tokenizer: BPE continuing_subword_prefix is not supported");
  }
  ASSIGN_OR_RETURN(const Json* dropout, Field(model, "dropout", kWhere));
  if (dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return absl::UnimplementedError("tokenizer: BPE dropout is not supported");
  }

  m->symbol_of_.reserve(vocab->size() + merges->size());
  for (const auto& [token, id_json] : vocab->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer file: field 'model.vocab' has a bad id for token '", token, "'"));
    }
    m->AddToken(token, static_cast<int32_t>(id_json.get<int64_t>()));
  }

  int32_t rank = 0;
  for (const Json& merge : *merges) {
    std::string left, right;
    if (merge.is_string()) {
      // "a b"; like the reference's split(" ", 2), text after a second space is ignored.
      const std::string& s = merge.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer file: field 'model.merges' entry ", rank, " has no space: '", s, "'"));
      }
      left = s.substr(0, space);
      size_t end = s.find(' ', space + 1);
      right = s.substr(space + 1, end == std::string::npos ? std::string::npos : end - space - 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer file: field 'model.merges' entry ", rank, " must be \"a b\" or [a, b]"));
    }
    int32_t l = m->InternSymbol(left);
    int32_t r = m->InternSymbol(right);
    int32_t result = m->InternSymbol(left + right);
    // A repeated pair keeps its last rank, as the reference's Map construction does.
    m->merges_[PairKey(l, r)] = MergeInfo{rank, result};
    ++rank;
  }

  ASSIGN_OR_RETURN(std::optional<std::string> unk, OptStringField(model, "unk_token", kWhere));
  if (unk.has_value()) {
    auto it = m->symbol_of_.find(*unk);
    if (it != m->symbol_of_.end() && m->token_of_symbol_[it->second] >= 0) {
      m->unk_id_ = m->token_of_symbol_[it->second];
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::optional<int32_t> id = m->TokenToId(absl::StrFormat("<0x%02X>", b));
    m->byte_ids_[b] = id.value_or(-1);
  }
  return m;
}

std::unique_ptr<BpeModel> BpeModel::FromScores(const std::vector<std::string>& tokens,
                                               const std::vector<float>& scores, std::optional<int32_t> unk_id) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->byte_fallback_ = true;
  m->byte_ids_.fill(-1);
  for (size_t i = 0; i < tokens.size(); ++i) m->AddToken(tokens[i], static_cast<int32_t>(i));
  if (unk_id.has_value() && m->IdToToken(*unk_id) != nullptr) m->unk_id_ = unk_id;
  // Rank = position of the score among the distinct scores, highest first.
  std::vector<float> distinct(scores.begin(), scores.begin() + std::min(scores.size(), tokens.size()));
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  auto is_piece = [&m](std::string_view text, size_t chars) {
    std::optional<int32_t> id = m->TokenToId(text);
    return chars == 1 || id.has_value();
  };
  for (size_t i = 0; i < tokens.size() && i < scores.size(); ++i) {
    const std::string& text = tokens[i];
    if (m->TokenToId(text) != static_cast<int32_t>(i)) continue;  // a duplicate: the later id holds the text
    if (text.size() > kMaxScoredTokenBytes) continue;
    const int32_t rank = static_cast<int32_t>(
        std::lower_bound(distinct.begin(), distinct.end(), scores[i], std::greater<float>()) - distinct.begin());
    std::vector<size_t> cuts;  // character boundaries inside the text
    for (size_t pos = 0; pos < text.size();) {
      NextChar(text, &pos);
      if (pos < text.size()) cuts.push_back(pos);
    }
    const int32_t result = m->symbol_of_.find(text)->second;
    for (size_t k = 0; k < cuts.size(); ++k) {
      const std::string_view left = std::string_view(text).substr(0, cuts[k]);
      const std::string_view right = std::string_view(text).substr(cuts[k]);
      if (!is_piece(left, k + 1) || !is_piece(right, cuts.size() - k)) continue;
      const int32_t l = m->InternSymbol(std::string(left));
      const int32_t r = m->InternSymbol(std::string(right));
      auto [it, inserted] = m->merges_.try_emplace(PairKey(l, r), MergeInfo{rank, result});
      if (!inserted && rank < it->second.rank) it->second = MergeInfo{rank, result};
    }
  }
  return m;
}

int32_t BpeModel::InternSymbol(const std::string& text) {
  auto [it, inserted] = symbol_of_.try_emplace(text, static_cast<int32_t>(token_of_symbol_.size()));
  if (inserted) token_of_symbol_.push_back(-1);
  return it->second;
}

void BpeModel::AddToken(const std::string& content, int32_t id) {
  int32_t symbol = InternSymbol(content);
  token_of_symbol_[symbol] = id;
  if (static_cast<size_t>(id) >= id_to_token_.size()) {
    id_to_token_.resize(static_cast<size_t>(id) + 1);
    id_valid_.resize(static_cast<size_t>(id) + 1, false);
  }
  id_to_token_[id] = content;
  id_valid_[id] = true;
  // A <0xNN> byte token may come after the vocabulary (as an added token).
  if (content.size() == 6 && content.rfind("<0x", 0) == 0 && content[5] == '>') {
    unsigned int b = 0;
    if (std::sscanf(content.c_str() + 3, "%2X", &b) == 1 && b < 256) byte_ids_[b] = id;
  }
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = symbol_of_.find(token);
  if (it == symbol_of_.end() || token_of_symbol_[it->second] < 0) return std::nullopt;
  return token_of_symbol_[it->second];
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_valid_[id]) return nullptr;
  return &id_to_token_[id];
}

absl::Status BpeModel::EmitPiece(std::string_view piece, int32_t symbol,
                                 std::vector<int32_t>* ids) const {
  if (symbol >= 0 && token_of_symbol_[symbol] >= 0) {
    ids->push_back(token_of_symbol_[symbol]);
    return absl::OkStatus();
  }
  if (byte_fallback_) {
    bool all = true;
    for (unsigned char c : piece) all = all && byte_ids_[c] >= 0;
    if (all) {
      for (unsigned char c : piece) ids->push_back(byte_ids_[c]);
      return absl::OkStatus();
    }
  }
  if (!unk_id_.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer: '", Av(piece), "' is not in the vocabulary and the model has no unk_token"));
  }
  ids->push_back(*unk_id_);
  return absl::OkStatus();
}

absl::Status BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    auto it = symbol_of_.find(word);
    if (it != symbol_of_.end() && token_of_symbol_[it->second] >= 0) {
      ids->push_back(token_of_symbol_[it->second]);
      return absl::OkStatus();
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return absl::OkStatus();
    }
  }
  size_t first = ids->size();
  RETURN_IF_ERROR(MergeWord(word, ids));
  if (cacheable) {
    std::vector<int32_t> result(ids->begin() + first, ids->end());
    absl::MutexLock lock(&cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(result));
  }
  return absl::OkStatus();
}

absl::Status BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  // One node per character; merges fold the right node into the left one.
  struct Node {
    int32_t symbol;  // -1: a character that is no symbol (never merges)
    int32_t prev, next;
    uint32_t begin, end;  // bytes of the text (end of the last one includes the suffix)
  };
  std::string text(word);
  text += end_of_word_suffix_;
  std::vector<Node> nodes;
  nodes.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    size_t begin = pos;
    NextChar(word, &pos);
    size_t end = pos == word.size() ? text.size() : pos;
    auto it = symbol_of_.find(std::string_view(text).substr(begin, end - begin));
    int32_t n = static_cast<int32_t>(nodes.size());
    nodes.push_back(Node{it == symbol_of_.end() ? -1 : it->second, n - 1, n + 1,
                         static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
  }
  nodes.back().next = -1;

  // Candidate merges ordered by (rank, position of the left node): lowest rank first,
  // leftmost first among equal ranks. Stale entries are skipped when popped.
  struct Candidate {
    int32_t rank, left, right, left_symbol, right_symbol, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t left) {
    int32_t right = nodes[left].next;
    if (right < 0 || nodes[left].symbol < 0 || nodes[right].symbol < 0) return;
    auto it = merges_.find(PairKey(nodes[left].symbol, nodes[right].symbol));
    if (it == merges_.end()) return;
    queue.push(Candidate{it->second.rank, left, right, nodes[left].symbol, nodes[right].symbol,
                         it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(nodes.size()); ++i) consider(i);
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Node& left = nodes[c.left];
    if (left.next != c.right || left.symbol != c.left_symbol || nodes[c.right].symbol != c.right_symbol) {
      continue;
    }
    Node& right = nodes[c.right];
    left.symbol = c.result;
    left.end = right.end;
    left.next = right.next;
    if (right.next >= 0) nodes[right.next].prev = c.left;
    right.symbol = -2;  // dead
    right.prev = right.next = -1;
    if (left.prev >= 0) consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = nodes[i].next) {
    const Node& node = nodes[i];
    RETURN_IF_ERROR(EmitPiece(std::string_view(text).substr(node.begin, node.end - node.begin),
                              node.symbol, ids));
  }
  return absl::OkStatus();
}

void BpeModel::FuseUnk(std::vector<int32_t>* ids, size_t from) const {
  if (!fuse_unk_ || !unk_id_.has_value()) return;
  size_t out = from;
  for (size_t i = from; i < ids->size(); ++i) {
    if ((*ids)[i] == *unk_id_ && out > from && (*ids)[out - 1] == *unk_id_) continue;
    (*ids)[out++] = (*ids)[i];
  }
  ids->resize(out);
}

}  // namespace kvtier::tokenizer
