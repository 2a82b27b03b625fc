// GgufTokenizerMetadata: a tokenizer.json as GGUF tokenizer.* metadata (gguf_tokenizer.h),
// the way llama.cpp's converter writes it. Stateless; thread-safe.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/strings.h"
#include "tokenizer/tokenizer_config.h"

namespace kvtier::tokenizer {
namespace {

// llama.cpp's converter marks added tokens that look like control tokens as control ones.
bool LooksSpecial(const std::string& token) {
  auto wrapped = [&token](std::string_view open, std::string_view close) {
    return token.size() >= open.size() + close.size() && token.starts_with(open) && token.ends_with(close);
  };
  return token == "<pad>" || token == "<mask>" || wrapped("<|", "|>") || wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") ||
         wrapped("<unused", ">");
}

bool IsByteToken(const std::string& token) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return token.size() == 6 && token.starts_with("<0x") && token[5] == '>' && hex(token[3]) && hex(token[4]);
}

// The GGUF pre-tokenizer name of a byte-level tokenizer.json's pre_tokenizer.
absl::StatusOr<std::string> PreTokenizerName(const Json& pre) {
  if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true)) return "gpt-2";
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    const Json& parts = pre.value("pretokenizers", Json::array());
    if (parts.size() == 2 && parts[0].value("type", "") == "Split" && parts[1].value("type", "") == "ByteLevel" &&
        !parts[1].value("use_regex", true) && parts[0].value("behavior", "") == "Isolated" &&
        !parts[0].value("invert", false) && parts[0].contains("pattern") && parts[0]["pattern"].is_object()) {
      const std::string regex = parts[0]["pattern"].value("Regex", "");
      for (std::string_view name : {"llama-bpe", "qwen2"}) {
        if (FindGgufPreTokenizer(name)->regex == regex) return std::string(name);
      }
      return absl::UnimplementedError(absl::StrCat("tokenizer.json's pre-tokenizer regex ", Json(regex).dump(),
                                                   " is none of llama.cpp's that kvtier writes (gpt-2, llama-bpe, qwen2)"));
    }
  }
  return absl::UnimplementedError(absl::StrCat("tokenizer.json's pre-tokenizer ", pre.dump().substr(0, 200),
                                               " has no GGUF form kvtier writes (gpt-2, llama-bpe, qwen2)"));
}

// The special tokens the "single" template of a TemplateProcessing post-processor puts
// before and after the sequence (the last of each side), when it has such a template.
struct TemplateSpecials {
  std::optional<std::string> before, after;
};
std::optional<TemplateSpecials> FindTemplateSpecials(const Json& post) {
  if (!post.is_object() || post.value("type", "") != "TemplateProcessing" || !post.contains("single") ||
      !post["single"].is_array()) {
    return std::nullopt;
  }
  TemplateSpecials specials;
  bool seen_sequence = false;
  for (const Json& item : post["single"]) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
    } else if (item.contains("SpecialToken") && item["SpecialToken"].is_object()) {
      const std::string id = item["SpecialToken"].value("id", "");
      (seen_sequence ? specials.after : specials.before) = id;
    }
  }
  return specials;
}

}  // namespace

absl::StatusOr<GgufMetadata> GgufTokenizerMetadata(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                                   int64_t vocab_size) {
  Json root = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object() || !root.contains("model") || !root["model"].is_object()) {
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object with a 'model'");
  }
  const Json& model = root["model"];
  if (model.value("type", "BPE") != "BPE") {
    return absl::UnimplementedError(absl::StrCat("tokenizer model type '", model.value("type", ""),
                                                 "' has no GGUF form kvtier writes (BPE only)"));
  }
  ASSIGN_OR_RETURN(TokenizerConfig config, ParseTokenizerConfig(tokenizer_config_json, ""));
  const bool spm = model.value("byte_fallback", false);

  // Every id: the vocabulary, then added tokens over it.
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int64_t> types(static_cast<size_t>(vocab_size), static_cast<int64_t>(GgufTokenType::kUnused));
  std::vector<bool> present(static_cast<size_t>(vocab_size), false);
  std::map<std::string, int64_t> id_of;
  auto place = [&](const std::string& token, int64_t id, GgufTokenType type) -> absl::Status {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer token '", token, "' has id ", id, ", outside the model's ", vocab_size, " tokens"));
    }
    tokens[id] = token;
    types[id] = static_cast<int64_t>(type);
    present[id] = true;
    id_of[token] = id;
    return absl::OkStatus();
  };
  if (!model.contains("vocab") || !model["vocab"].is_object()) return absl::InvalidArgumentError("tokenizer.json has no model.vocab");
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return absl::InvalidArgumentError(absl::StrCat("tokenizer token '", token, "' has a bad id"));
    RETURN_IF_ERROR(place(token, id.get<int64_t>(),
                          spm && IsByteToken(token) ? GgufTokenType::kByte : GgufTokenType::kNormal));
  }
  const std::string unk = model.contains("unk_token") && model["unk_token"].is_string() ? model["unk_token"].get<std::string>() : "";
  for (const Json& added : root.value("added_tokens", Json::array())) {
    if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() || !added.contains("content") ||
        !added["content"].is_string()) {
      return absl::InvalidArgumentError("tokenizer.json has a malformed added token");
    }
    std::string content = added["content"].get<std::string>();
    GgufTokenType type = GgufTokenType::kUserDefined;
    if (spm && content == unk) {
      type = GgufTokenType::kUnknown;
    } else if (added.value("special", false) || LooksSpecial(content)) {
      type = GgufTokenType::kControl;
    } else {
      // llama.cpp expects user-defined tokens with their spaces as spaces.
      for (size_t at; (at = content.find(kSpieceUnderline)) != std::string::npos;) content.replace(at, kSpieceUnderline.size(), " ");
    }
    RETURN_IF_ERROR(place(content, added["id"].get<int64_t>(), type));
  }
  for (int64_t i = 0; i < vocab_size; ++i) {
    if (!present[i]) tokens[i] = absl::StrCat("[PAD", i, "]");
  }

  // Merges as "left right" strings, in rank order.
  std::vector<std::string> merges;
  for (const Json& merge : model.value("merges", Json::array())) {
    if (merge.is_string()) {
      merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      merges.push_back(absl::StrCat(merge[0].get<std::string>(), " ", merge[1].get<std::string>()));
    } else {
      return absl::InvalidArgumentError("tokenizer.json has a malformed merge");
    }
  }

  GgufMetadata m;
  m.emplace_back("tokenizer.ggml.model", GgufValue::String(spm ? "llama" : "gpt2"));
  if (!spm) {
    ASSIGN_OR_RETURN(std::string pre, PreTokenizerName(root.value("pre_tokenizer", Json())));
    m.emplace_back("tokenizer.ggml.pre", GgufValue::String(pre));
  }
  m.emplace_back("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  if (spm) {
    // llama.cpp merges the pair whose result scores highest: score a token by the rank of
    // the first merge that makes it, so it merges in the tokenizer.json's order.
    std::vector<double> scores(static_cast<size_t>(vocab_size), 0.0);
    std::vector<bool> scored(static_cast<size_t>(vocab_size), false);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const size_t space = merges[rank].find(' ');
      if (space == std::string::npos) continue;
      std::string result = merges[rank];
      result.erase(space, 1);
      auto it = id_of.find(result);
      if (it == id_of.end() || scored[it->second]) continue;
      scores[it->second] = -static_cast<double>(rank);
      scored[it->second] = true;
    }
    for (int64_t i = 0; i < vocab_size; ++i) {
      if (!scored[i] && types[i] == static_cast<int64_t>(GgufTokenType::kNormal)) {
        scores[i] = -static_cast<double>(merges.size() + static_cast<size_t>(i));
      }
    }
    m.emplace_back("tokenizer.ggml.scores", GgufValue::RealArray(GgufValueType::kFloat32, std::move(scores)));
  }
  m.emplace_back("tokenizer.ggml.token_type", GgufValue::IntArray(GgufValueType::kInt32, std::move(types)));
  if (!spm) m.emplace_back("tokenizer.ggml.merges", GgufValue::StringArray(std::move(merges)));

  auto id_key = [&](const char* key, const std::optional<std::string>& token) {
    if (!token.has_value()) return;
    if (auto it = id_of.find(*token); it != id_of.end()) m.emplace_back(key, GgufValue::Uint32(static_cast<uint32_t>(it->second)));
  };
  // BOS/EOS: tokenizer_config.json's, else those the template adds.
  std::optional<std::string> bos = config.bos_token, eos = config.eos_token;
  std::optional<bool> add_bos = config.add_bos_token, add_eos = config.add_eos_token;
  if (const std::optional<TemplateSpecials> specials = FindTemplateSpecials(root.value("post_processor", Json()))) {
    if (!add_bos.has_value()) add_bos = specials->before.has_value();
    if (!add_eos.has_value()) add_eos = specials->after.has_value();
    if (!bos.has_value()) bos = specials->before;
    if (!eos.has_value()) eos = specials->after;
  }
  id_key("tokenizer.ggml.bos_token_id", bos);
  id_key("tokenizer.ggml.eos_token_id", eos);
  if (!unk.empty()) id_key("tokenizer.ggml.unknown_token_id", unk);
  if (add_bos.has_value()) m.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::Bool(*add_bos));
  if (add_eos.has_value()) m.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::Bool(*add_eos));
  if (spm) {
    // A space before the text: tokenizer.json's Prepend normalizer or Metaspace prefix.
    const std::string normalizer = root.value("normalizer", Json()).dump();
    const Json& pre = root.value("pre_tokenizer", Json());
    const bool metaspace_prefix = pre.is_object() && pre.value("type", "") == "Metaspace" &&
                                  pre.value("prepend_scheme", pre.value("add_prefix_space", true) ? "always" : "never") != "never";
    m.emplace_back("tokenizer.ggml.add_space_prefix",
                   GgufValue::Bool(normalizer.find("\"Prepend\"") != std::string::npos || metaspace_prefix));
  }
  if (config.chat_template.has_value()) m.emplace_back("tokenizer.chat_template", GgufValue::String(*config.chat_template));
  return m;
}

}  // namespace kvtier::tokenizer
