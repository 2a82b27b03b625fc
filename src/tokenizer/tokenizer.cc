// Tokenizer: loading and the encode/decode pipelines.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("tokenizer: cannot open '", path, "'"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("tokenizer: cannot read '", path, "'"));
  return buffer.str();
}

}  // namespace

std::string CleanUpTokenizationSpaces(std::string text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    if (text.find(from) != std::string::npos) text = absl::StrReplaceAll(text, {{Av(from), Av(to)}});
  }
  return text;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view tokenizer_config_json,
                                                               std::string_view generation_config_json) {
  Json root = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("tokenizer file: tokenizer.json is not valid JSON");
  if (!root.is_object()) return absl::InvalidArgumentError("tokenizer file: tokenizer.json must hold an object");
  ASSIGN_OR_RETURN(TokenizerConfig config, ParseTokenizerConfig(tokenizer_config_json, generation_config_json));
  auto model = root.find("model");
  if (model == root.end() || model->is_null()) return absl::InvalidArgumentError("tokenizer file: missing field 'model'");
  ASSIGN_OR_RETURN(std::unique_ptr<BpeModel> bpe, BpeModel::FromJson(*model));
  return FromParts(root, std::move(bpe), std::move(config));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromParts(const Json& root, std::unique_ptr<BpeModel> model,
                                                                TokenizerConfig config,
                                                                std::unique_ptr<PreTokenizer> pre_tokenizer) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->config_ = std::move(config);
  auto part = [&root](const char* key) -> const Json& {
    static const Json kNull;
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };
  t->model_ = std::move(model);
  ASSIGN_OR_RETURN(t->added_, AddedTokens::FromJson(part("added_tokens")));
  for (const AddedToken& added : t->added_.tokens()) {
    t->model_->AddToken(added.content, added.id);
    t->added_contents_.insert(added.content);
    if (added.special) t->special_contents_.insert(added.content);
  }
  for (const std::string& extra : t->config_.additional_special_tokens) t->special_contents_.insert(extra);

  ASSIGN_OR_RETURN(t->normalizer_, Normalizer::FromJson(part("normalizer")));
  if (pre_tokenizer != nullptr) {
    t->pre_tokenizer_ = std::move(pre_tokenizer);
  } else {
    ASSIGN_OR_RETURN(t->pre_tokenizer_, PreTokenizer::FromJson(part("pre_tokenizer")));
  }
  const BpeModel* bpe = t->model_.get();
  ASSIGN_OR_RETURN(t->post_processor_,
                   PostProcessor::FromJson(part("post_processor"), [bpe](std::string_view token) {
                     return bpe->TokenToId(token);
                   }));
  ASSIGN_OR_RETURN(t->decoder_, Decoder::FromJson(part("decoder"), &t->added_contents_));

  const std::string& cls = t->config_.tokenizer_class.value_or("");
  if ((cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast") && t->config_.legacy == false) {
    // As transformers.js does for non-legacy Llama tokenizers.
    t->llama_non_legacy_ = true;
    t->normalizer_ = nullptr;
    t->pre_tokenizer_ = PreTokenizer::MakeMetaspace(std::string(kSpieceUnderline), true, true);
  }

  if (t->config_.bos_token.has_value()) t->bos_id_ = t->TokenToId(*t->config_.bos_token);
  if (!t->bos_id_.has_value()) t->bos_id_ = t->config_.generation_bos_id;
  if (t->config_.eos_token.has_value()) t->eos_id_ = t->TokenToId(*t->config_.eos_token);
  if (t->eos_id_.has_value()) t->stop_ids_.push_back(*t->eos_id_);
  for (int32_t id : t->config_.generation_eos_ids) {
    if (std::find(t->stop_ids_.begin(), t->stop_ids_.end(), id) == t->stop_ids_.end()) {
      t->stop_ids_.push_back(id);
    }
  }
  if (!t->eos_id_.has_value() && !t->stop_ids_.empty()) t->eos_id_ = t->stop_ids_.front();

  t->chat_format_ = DetectChatFormat(t->config_.chat_template.value_or(""), [bpe](std::string_view s) {
    return bpe->TokenToId(s).has_value();
  });
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& tokenizer_json_path) {
  ASSIGN_OR_RETURN(std::string json, ReadFile(tokenizer_json_path));
  std::filesystem::path dir = std::filesystem::path(tokenizer_json_path).parent_path();
  std::string config, generation;
  std::error_code ec;
  if (std::filesystem::exists(dir / "tokenizer_config.json", ec)) {
    ASSIGN_OR_RETURN(config, ReadFile((dir / "tokenizer_config.json").string()));
  }
  if (std::filesystem::exists(dir / "generation_config.json", ec)) {
    ASSIGN_OR_RETURN(generation, ReadFile((dir / "generation_config.json").string()));
  }
  return FromJson(json, config, generation);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  return FromFile((std::filesystem::path(dir) / "tokenizer.json").string());
}

absl::Status Tokenizer::EncodeSection(std::string_view text, int section_index,
                                      std::vector<int32_t>* ids) const {
  std::string x(text);
  if (config_.remove_space) {
    // trim(), then every whitespace run becomes one space.
    std::string_view trimmed = TrimEndJs(TrimStartJs(x));
    std::string collapsed;
    bool in_space = false;
    for (size_t pos = 0; pos < trimmed.size();) {
      size_t start = pos;
      if (IsJsSpace(NextChar(trimmed, &pos))) {
        if (!in_space) collapsed.push_back(' ');
        in_space = true;
      } else {
        collapsed.append(trimmed.substr(start, pos - start));
        in_space = false;
      }
    }
    x = std::move(collapsed);
  }
  if (normalizer_ != nullptr) {
    ASSIGN_OR_RETURN(x, normalizer_->Normalize(std::move(x)));
    if (x.empty()) return absl::OkStatus();
  }
  std::vector<std::string> words;
  words.push_back(std::move(x));
  if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(&words, section_index);
  size_t first = ids->size();
  for (const std::string& word : words) RETURN_IF_ERROR(model_->EncodeWord(word, ids));
  model_->FuseUnk(ids, first);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       const EncodeOptions& options) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("tokenizer: text is not valid UTF-8");
  std::string rewritten;
  if (llama_non_legacy_ && !text.empty()) {
    rewritten = absl::StrCat(Av(kSpieceUnderline), absl::StrReplaceAll(Av(text), {{Av(kSpieceUnderline), " "}}));
    text = rewritten;
  }
  std::vector<Section> sections;
  added_.Split(text, options.parse_special, &sections);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (size_t k = 0; k < sections.size(); ++k) {
    const Section& section = sections[k];
    if (section.token_index.has_value()) {
      ids.push_back(added_.tokens()[*section.token_index].id);
    } else if (!section.text.empty()) {
      RETURN_IF_ERROR(EncodeSection(section.text, static_cast<int>(k), &ids));
    }
  }
  if (llama_non_legacy_ && ids.size() > 1 && IdToToken(ids[0]).value_or("") == kSpieceUnderline &&
      IsSpecial(ids[1])) {
    ids.erase(ids.begin());
  }
  if (post_processor_ != nullptr) ids = post_processor_->Process(std::move(ids), options.add_special_tokens);
  return ids;
}

absl::StatusOr<std::string> Tokenizer::IdToToken(int32_t id) const {
  const std::string* token = model_->IdToToken(id);
  if (token == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: token id ", id, " is outside the vocabulary (size ", vocab_size(), ")"));
  }
  return *token;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const std::string* token = model_->IdToToken(id);
  return token != nullptr && special_contents_.contains(*token);
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              const DecodeOptions& options) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = model_->IdToToken(id);
    if (token == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: token id ", id, " is outside the vocabulary (size ", vocab_size(), ")"));
    }
    if (options.skip_special_tokens && special_contents_.contains(*token)) continue;
    tokens.push_back(*token);
  }
  std::string text;
  if (decoder_ != nullptr) {
    decoder_->DecodeChain(&tokens);
    text = absl::StrJoin(tokens, "");
  } else {
    text = absl::StrJoin(tokens, " ");
  }
  if (options.clean_up_tokenization_spaces.value_or(config_.clean_up_tokenization_spaces)) {
    text = CleanUpTokenizationSpaces(std::move(text));
  }
  return text;
}

std::optional<std::string> Tokenizer::TokenBytes(int32_t id) const {
  const std::string* token = model_->IdToToken(id);
  if (token == nullptr || special_contents_.contains(*token)) return std::nullopt;
  std::string bytes = *token;
  if (decoder_ != nullptr) decoder_->TokenToBytes(&bytes);
  return bytes;
}

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplate(absl::Span<const ChatMessage> messages,
                                                         bool add_generation_prompt) const {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = config_.bos_token.value_or("");
  options.eos_token = config_.eos_token.value_or("");
  return FormatChat(chat_format_, messages, options);
}

}  // namespace kvtier::tokenizer
