// Parsing of tokenizer_config.json and generation_config.json.
#include "tokenizer/tokenizer_config.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/strings.h"

namespace kvtier::tokenizer {
namespace {

// A token named by the config: "text" or {"__type": "AddedToken", "content": "text"}.
absl::StatusOr<std::optional<std::string>> TokenName(const Json& config, std::string_view key) {
  ASSIGN_OR_RETURN(const Json* v, Field(config, key, "tokenizer_config"));
  if (v == nullptr) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    auto content = v->find("content");
    if (content != v->end() && content->is_string()) {
      return std::optional<std::string>(content->get<std::string>());
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tokenizer file: field 'tokenizer_config.", Av(key), "' must be a string or an AddedToken object"));
}

absl::StatusOr<std::optional<bool>> OptBool(const Json& config, std::string_view key) {
  ASSIGN_OR_RETURN(const Json* v, Field(config, key, "tokenizer_config"));
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer file: field 'tokenizer_config.", Av(key), "' must be a boolean"));
  }
  return std::optional<bool>(v->get<bool>());
}

absl::Status ParseMain(const Json& config, TokenizerConfig* out) {
  constexpr std::string_view kWhere = "tokenizer_config";
  if (!config.is_object()) return absl::InvalidArgumentError("tokenizer file: tokenizer_config.json must hold an object");
  ASSIGN_OR_RETURN(out->tokenizer_class, OptStringField(config, "tokenizer_class", kWhere));
  ASSIGN_OR_RETURN(out->bos_token, TokenName(config, "bos_token"));
  ASSIGN_OR_RETURN(out->eos_token, TokenName(config, "eos_token"));
  ASSIGN_OR_RETURN(out->add_bos_token, OptBool(config, "add_bos_token"));
  ASSIGN_OR_RETURN(out->add_eos_token, OptBool(config, "add_eos_token"));
  ASSIGN_OR_RETURN(out->legacy, OptBool(config, "legacy"));
  ASSIGN_OR_RETURN(out->clean_up_tokenization_spaces,
                   BoolField(config, "clean_up_tokenization_spaces", kWhere, true));
  ASSIGN_OR_RETURN(out->remove_space, BoolField(config, "remove_space", kWhere, false));
  ASSIGN_OR_RETURN(bool lower, BoolField(config, "do_lowercase_and_remove_accent", kWhere, false));
  if (lower) return absl::UnimplementedError("tokenizer: do_lowercase_and_remove_accent is not supported");
  ASSIGN_OR_RETURN(const Json* extra, Field(config, "additional_special_tokens", kWhere));
  if (extra != nullptr) {
    if (!extra->is_array()) {
      return absl::InvalidArgumentError(
          "tokenizer file: field 'tokenizer_config.additional_special_tokens' must be an array");
    }
    for (const Json& item : *extra) {
      if (item.is_string()) {
        out->additional_special_tokens.push_back(item.get<std::string>());
      } else if (item.is_object() && item.contains("content") && item["content"].is_string()) {
        out->additional_special_tokens.push_back(item["content"].get<std::string>());
      } else {
        return absl::InvalidArgumentError(
            "tokenizer file: field 'tokenizer_config.additional_special_tokens[]' must be a string");
      }
    }
  }
  ASSIGN_OR_RETURN(const Json* chat, Field(config, "chat_template", kWhere));
  if (chat != nullptr) {
    if (chat->is_string()) {
      out->chat_template = chat->get<std::string>();
    } else if (chat->is_array()) {
      // A list of named templates: the "default" one.
      for (const Json& item : *chat) {
        if (item.is_object() && item.value("name", "") == "default" && item.contains("template") &&
            item["template"].is_string()) {
          out->chat_template = item["template"].get<std::string>();
        }
      }
    } else {
      return absl::InvalidArgumentError(
          "tokenizer file: field 'tokenizer_config.chat_template' must be a string or a list");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseGeneration(const Json& config, TokenizerConfig* out) {
  if (!config.is_object()) return absl::InvalidArgumentError("tokenizer file: generation_config.json must hold an object");
  auto eos = config.find("eos_token_id");
  if (eos != config.end() && !eos->is_null()) {
    if (eos->is_number_integer()) {
      out->generation_eos_ids.push_back(eos->get<int32_t>());
    } else if (eos->is_array()) {
      for (const Json& id : *eos) {
        if (!id.is_number_integer()) {
          return absl::InvalidArgumentError(
              "tokenizer file: field 'generation_config.eos_token_id' must hold integers");
        }
        out->generation_eos_ids.push_back(id.get<int32_t>());
      }
    } else {
      return absl::InvalidArgumentError(
          "tokenizer file: field 'generation_config.eos_token_id' must be an integer or a list");
    }
  }
  auto bos = config.find("bos_token_id");
  if (bos != config.end() && bos->is_number_integer()) out->generation_bos_id = bos->get<int32_t>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view tokenizer_config_json,
                                                     std::string_view generation_config_json) {
  TokenizerConfig out;
  if (!tokenizer_config_json.empty()) {
    Json config = Json::parse(tokenizer_config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) return absl::InvalidArgumentError("tokenizer file: tokenizer_config.json is not valid JSON");
    RETURN_IF_ERROR(ParseMain(config, &out));
  }
  if (!generation_config_json.empty()) {
    Json config = Json::parse(generation_config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) return absl::InvalidArgumentError("tokenizer file: generation_config.json is not valid JSON");
    RETURN_IF_ERROR(ParseGeneration(config, &out));
  }
  return out;
}

}  // namespace kvtier::tokenizer
