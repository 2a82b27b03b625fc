// Tokenizer::FromGguf: llama.cpp's tokenizer from a GGUF file's tokenizer.* metadata, built
// from kvtier's tokenizer.json parts (gguf_tokenizer.h). Stateless; thread-safe.
#include "tokenizer/gguf_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf_file.h"
#include "tokenizer/split_regex.h"
#include "tokenizer/strings.h"
#include "tokenizer/tokenizer.h"

namespace kvtier::tokenizer {
namespace {

// The tokenizer.json regexes llama.cpp's expressions implement.
constexpr GgufPreTokenizer kPreTokenizers[] = {
    {"gpt-2", kGpt2Pattern, false, false, true},
    {"llama-bpe", kLlama3Pattern, true, true, true},
    {"llama3", kLlama3Pattern, true, true, true},
    {"llama-v3", kLlama3Pattern, true, true, true},
    {"qwen2", kQwen2Pattern, false, false, false},
    {"deepseek-r1-qwen", kQwen2Pattern, false, false, false},
};

// Tokens llama.cpp takes for ends of generation by their text, making them control tokens
// whatever their type says (llama-vocab.cpp); "</s>" not when "<|tool_response>" exists.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>",     "<|end|>",    "<|return|>",         "<|call|>",          "<|flush|>",
    "<|calls|>",  "<end_of_turn>",  "<|endoftext|>", "</s>",             "<|eom_id|>",        "<EOT>",
    "_<EOT>",     "[EOT]",          "[EOS]",      "<|end_of_text|>",    "<end_of_utterance>", "<eos>",
    "<turn|>",    "<|tool_response>", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~[",
};

// Reads the tokenizer.* keys, refusing mistyped ones by name.
class Keys {
 public:
  explicit Keys(const GgufFile& file) : file_(file) {}

  absl::Status Bad(std::string_view key, std::string_view want) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ": ", std::string(key), " must be ", std::string(want)));
  }

  absl::StatusOr<std::optional<int32_t>> Id(std::string_view key, int64_t num_tokens) const {
    const GgufValue* v = file_.Find(key);
    if (v == nullptr) return std::optional<int32_t>();
    const std::optional<int64_t> id = v->AsInt();
    if (!id.has_value()) return Bad(key, "an integer token id");
    // llama.cpp ignores an id outside the vocabulary (with a warning); so does kvtier.
    if (*id < 0 || *id >= num_tokens) return std::optional<int32_t>();
    return std::optional<int32_t>(static_cast<int32_t>(*id));
  }

  absl::StatusOr<std::optional<bool>> Bool(std::string_view key) const {
    const GgufValue* v = file_.Find(key);
    if (v == nullptr) return std::optional<bool>();
    if (!v->AsBool().has_value()) return Bad(key, "a bool");
    return v->AsBool();
  }

 private:
  const GgufFile& file_;
};

Json AddedTokenJson(int32_t id, const std::string& content, bool special) {
  return {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},  {"normalized", false}, {"special", special}};
}

Json SpecialTemplate(const std::optional<std::string>& bos, const std::optional<std::string>& eos,
                     const std::optional<int32_t>& bos_id, const std::optional<int32_t>& eos_id) {
  Json single = Json::array();
  Json specials = Json::object();
  if (bos.has_value()) {
    single.push_back({{"SpecialToken", {{"id", *bos}, {"type_id", 0}}}});
    specials[*bos] = {{"id", *bos}, {"ids", {*bos_id}}, {"tokens", {*bos}}};
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos.has_value()) {
    single.push_back({{"SpecialToken", {{"id", *eos}, {"type_id", 0}}}});
    specials[*eos] = {{"id", *eos}, {"ids", {*eos_id}}, {"tokens", {*eos}}};
  }
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
}

}  // namespace

const GgufPreTokenizer* FindGgufPreTokenizer(std::string_view name) {
  for (const GgufPreTokenizer& p : kPreTokenizers) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGgufFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  return FromGguf(*file);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  const Keys keys(file);
  const GgufValue* model_value = file.Find("tokenizer.ggml.model");
  if (model_value == nullptr) {
    return absl::NotFoundError(absl::StrCat(file.path(), " has no tokenizer (no tokenizer.ggml.model)"));
  }
  if (model_value->AsString() == nullptr) return keys.Bad("tokenizer.ggml.model", "a string");
  const std::string model_name = *model_value->AsString();
  if (model_name == "none" || model_name == "no_vocab") {
    return absl::NotFoundError(absl::StrCat(file.path(), " has no tokenizer (tokenizer.ggml.model is '", model_name, "')"));
  }
  const bool spm = model_name == "llama";
  if (!spm && model_name != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": tokenizer model '", model_name,
                                                 "' is not supported (kvtier reads 'gpt2' and 'llama')"));
  }
  const GgufPreTokenizer* pre = nullptr;
  if (!spm) {
    const GgufValue* pre_value = file.Find("tokenizer.ggml.pre");
    const std::string pre_name = pre_value != nullptr && pre_value->AsString() != nullptr ? *pre_value->AsString() : "default";
    pre = FindGgufPreTokenizer(pre_name);
    if (pre == nullptr) {
      return absl::UnimplementedError(absl::StrCat(file.path(), ": pre-tokenizer '", pre_name,
                                                   "' (tokenizer.ggml.pre) is not supported (kvtier reads gpt-2, "
                                                   "llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen)"));
    }
  }

  const GgufValue* tokens_value = file.Find("tokenizer.ggml.tokens");
  if (tokens_value == nullptr || !tokens_value->is_array() || tokens_value->element_type() != GgufValueType::kString) {
    return keys.Bad("tokenizer.ggml.tokens", "an array of strings");
  }
  std::vector<std::string> tokens = tokens_value->strings();
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i].empty()) tokens[i] = absl::StrCat("[EMPTY_", i, "]");  // as llama.cpp renames them
  }
  std::vector<int64_t> types(static_cast<size_t>(n), static_cast<int64_t>(GgufTokenType::kNormal));
  if (const GgufValue* v = file.Find("tokenizer.ggml.token_type")) {
    if (!v->is_array() || v->element_type() != GgufValueType::kInt32 || static_cast<int64_t>(v->size()) < n) {
      return keys.Bad("tokenizer.ggml.token_type", "an array of i32 with one per token");
    }
    types.assign(v->ints().begin(), v->ints().begin() + n);
  }
  std::vector<float> scores(static_cast<size_t>(n), 0.0f);
  if (const GgufValue* v = file.Find("tokenizer.ggml.scores")) {
    if (!v->is_array() || static_cast<int64_t>(v->size()) < n ||
        (v->element_type() != GgufValueType::kFloat32 && v->element_type() != GgufValueType::kInt32)) {
      return keys.Bad("tokenizer.ggml.scores", "an array of f32 (or i32) with one per token");
    }
    for (int64_t i = 0; i < n; ++i) {
      scores[i] = v->element_type() == GgufValueType::kFloat32 ? static_cast<float>(v->reals()[i])
                                                               : static_cast<float>(v->ints()[i]);
    }
  }

  // Special ids: the file's, else llama.cpp's defaults for the model type.
  ASSIGN_OR_RETURN(std::optional<int32_t> bos, keys.Id("tokenizer.ggml.bos_token_id", n));
  ASSIGN_OR_RETURN(std::optional<int32_t> eos, keys.Id("tokenizer.ggml.eos_token_id", n));
  ASSIGN_OR_RETURN(std::optional<int32_t> unk, keys.Id("tokenizer.ggml.unknown_token_id", n));
  ASSIGN_OR_RETURN(std::optional<int32_t> eot, keys.Id("tokenizer.ggml.eot_token_id", n));
  ASSIGN_OR_RETURN(std::optional<int32_t> eom, keys.Id("tokenizer.ggml.eom_token_id", n));
  auto fallback = [n](std::optional<int32_t> id, int32_t default_id) {
    return id.has_value() || default_id >= n ? id : std::optional<int32_t>(default_id);
  };
  bos = fallback(bos, spm ? 1 : 11);
  eos = fallback(eos, spm ? 2 : 11);
  if (spm) unk = fallback(unk, 0);
  ASSIGN_OR_RETURN(std::optional<bool> add_bos, keys.Bool("tokenizer.ggml.add_bos_token"));
  ASSIGN_OR_RETURN(std::optional<bool> add_eos, keys.Bool("tokenizer.ggml.add_eos_token"));
  ASSIGN_OR_RETURN(std::optional<bool> add_space_prefix, keys.Bool("tokenizer.ggml.add_space_prefix"));
  const bool with_bos = add_bos.value_or(spm || pre->add_bos) && bos.has_value();
  const bool with_eos = add_eos.value_or(false) && eos.has_value();

  // llama.cpp's end-of-generation tokens, found by their text: control tokens, and stops.
  std::vector<int32_t> end_of_generation;
  bool has_tool_response = false;
  for (int64_t i = 0; i < n; ++i) has_tool_response = has_tool_response || tokens[i] == "<|tool_response>";
  for (int64_t i = 0; i < n; ++i) {
    for (std::string_view eog : kEndOfGenerationTexts) {
      if (tokens[i] != eog || (has_tool_response && eog == "</s>")) continue;
      types[i] = static_cast<int64_t>(GgufTokenType::kControl);
      end_of_generation.push_back(static_cast<int32_t>(i));
    }
  }

  Json root = Json::object();
  Json added = Json::array();
  for (int64_t i = 0; i < n; ++i) {
    const auto type = static_cast<GgufTokenType>(types[i]);
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUnknown || type == GgufTokenType::kUserDefined) {
      added.push_back(AddedTokenJson(static_cast<int32_t>(i), tokens[i], type != GgufTokenType::kUserDefined));
    }
  }
  root["added_tokens"] = std::move(added);
  const auto text = [&tokens](std::optional<int32_t> id) {
    return id.has_value() ? std::optional<std::string>(tokens[*id]) : std::nullopt;
  };
  root["post_processor"] = SpecialTemplate(with_bos ? text(bos) : std::nullopt, with_eos ? text(eos) : std::nullopt,
                                           bos, eos);
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // gpt2: the regex split, with llama.cpp's \s
  if (spm) {
    Json normalizers = Json::array();
    if (add_space_prefix.value_or(true)) normalizers.push_back({{"type", "Prepend"}, {"prepend", std::string(kSpieceUnderline)}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kSpieceUnderline)}});
    root["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    Json decoders = {{{"type", "Replace"}, {"pattern", {{"String", std::string(kSpieceUnderline)}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}};
    if (add_space_prefix.value_or(true)) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    model = BpeModel::FromScores(tokens, scores, unk);
  } else {
    const GgufValue* merges_value = file.Find("tokenizer.ggml.merges");
    if (merges_value == nullptr || !merges_value->is_array() || merges_value->element_type() != GgufValueType::kString) {
      return keys.Bad("tokenizer.ggml.merges", "an array of strings");
    }
    Json vocab = Json::object();
    for (int64_t i = 0; i < n; ++i) vocab[tokens[i]] = i;
    Json merges = Json::array();
    for (const std::string& merge : merges_value->strings()) {
      // As llama.cpp splits them: at the first space after the first byte.
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) {
        merges.push_back(Json::array({"", ""}));
      } else {
        merges.push_back(Json::array({merge.substr(0, space), merge.substr(space + 1)}));
      }
    }
    ASSIGN_OR_RETURN(model, BpeModel::FromJson({{"type", "BPE"},
                                                {"vocab", std::move(vocab)},
                                                {"merges", std::move(merges)},
                                                {"ignore_merges", pre->ignore_merges},
                                                {"byte_fallback", false}}));
    ASSIGN_OR_RETURN(std::unique_ptr<SplitRegex> regex, SplitRegex::Create(pre->regex, RegexSpaces::kUnicode));
    pre_tokenizer = PreTokenizer::MakeByteLevel(std::move(regex));
    root["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  }

  // Built directly: the file's strings need not be valid UTF-8, which JSON text must be.
  TokenizerConfig config;
  config.clean_up_tokenization_spaces = !spm && pre->clean_spaces;
  if (bos.has_value()) config.bos_token = tokens[*bos];
  if (eos.has_value()) config.eos_token = tokens[*eos];
  if (const GgufValue* v = file.Find("tokenizer.chat_template"); v != nullptr && v->AsString() != nullptr) {
    config.chat_template = *v->AsString();
  }
  for (const std::optional<int32_t>& id : {eos, eot, eom}) {
    if (id.has_value()) config.generation_eos_ids.push_back(*id);
  }
  for (int32_t id : end_of_generation) config.generation_eos_ids.push_back(id);
  return FromParts(root, std::move(model), std::move(config), std::move(pre_tokenizer));
}

}  // namespace kvtier::tokenizer
