// TokenizerConfig: what kvtier reads from tokenizer_config.json and generation_config.json
// (special token names, BOS/EOS handling, decode clean-up, chat template). A plain value.
#ifndef KVTIER_TOKENIZER_TOKENIZER_CONFIG_H_
#define KVTIER_TOKENIZER_TOKENIZER_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::tokenizer {

struct TokenizerConfig {
  std::optional<std::string> tokenizer_class;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  // transformers.js defaults this to true when the file does not say.
  bool clean_up_tokenization_spaces = true;
  std::vector<std::string> additional_special_tokens;
  std::optional<std::string> chat_template;  // Jinja source; only used to pick a built-in
  std::optional<bool> legacy;                // Llama tokenizers: false selects the non-legacy path
  bool remove_space = false;
  // From generation_config.json: eos_token_id (one id or a list) and bos_token_id.
  std::vector<int32_t> generation_eos_ids;
  std::optional<int32_t> generation_bos_id;
};

// Either text may be empty (file absent). InvalidArgument naming the field when malformed;
// Unimplemented for options kvtier does not implement (do_lowercase_and_remove_accent).
absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view tokenizer_config_json,
                                                     std::string_view generation_config_json);

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_TOKENIZER_CONFIG_H_
