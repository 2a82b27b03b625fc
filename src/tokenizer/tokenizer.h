// Tokenizer: a HuggingFace tokenizer.json (BPE: byte-level or sentencepiece-style) plus its
// tokenizer_config.json / generation_config.json, encoding and decoding exactly as the
// transformers tokenizers do (the reference in tests is transformers.js).
// Immutable after loading; Encode/Decode are const and thread-safe.
#ifndef KVTIER_TOKENIZER_TOKENIZER_H_
#define KVTIER_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/strings.h"
#include "tokenizer/tokenizer_config.h"

namespace kvtier {
class GgufFile;  // model/gguf_file.h
}  // namespace kvtier

namespace kvtier::tokenizer {

struct EncodeOptions {
  // Apply the post-processor's template (e.g. BOS for Llama-2). Chat prompts carry their
  // own BOS text and are encoded without.
  bool add_special_tokens = true;
  // Special-token strings in the text ("<|im_end|>") become their ids; false leaves them
  // as text (non-special added tokens are still matched).
  bool parse_special = true;
};

struct DecodeOptions {
  bool skip_special_tokens = false;
  // transformers' clean_up_tokenization (" ." -> "." ...); nullopt: as the tokenizer's
  // config says (clean_up_tokenization_spaces, default true).
  std::optional<bool> clean_up_tokenization_spaces;
};

// transformers' clean_up_tokenization: removes the space before . ? ! , and English
// contractions, one rule after another.
std::string CleanUpTokenizationSpaces(std::string text);

class Tokenizer {
 public:
  // tokenizer_config_json / generation_config_json may be empty (no such file).
  // InvalidArgument naming the field for malformed files; Unimplemented naming the type for
  // model/normalizer/pre-tokenizer/post-processor/decoder types kvtier does not implement.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                             std::string_view tokenizer_config_json = {},
                                                             std::string_view generation_config_json = {});
  // tokenizer.json at path, with tokenizer_config.json and generation_config.json from the
  // same directory when they exist. NotFound when path is missing.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& tokenizer_json_path);
  // dir/tokenizer.json (+ the config files beside it).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  // The tokenizer a GGUF file's tokenizer.* metadata describes, encoding as llama.cpp does
  // (gguf_tokenizer.h): NotFound when the file has no tokenizer; Unimplemented naming a
  // tokenizer model or pre-tokenizer kvtier does not implement; InvalidArgument naming a
  // malformed key.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  // FromGguf of the file at path (errors of GgufFile::Open too).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGgufFile(const std::string& path);

  // InvalidArgument when text is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              const EncodeOptions& options = {}) const;
  // InvalidArgument for an id outside the vocabulary. Invalid UTF-8 produced by byte tokens
  // becomes U+FFFD.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     const DecodeOptions& options = {}) const;

  int32_t vocab_size() const { return model_->vocab_size(); }
  std::optional<int32_t> TokenToId(std::string_view token) const { return model_->TokenToId(token); }
  // The vocabulary string of id (byte-level or sentencepiece form, not text).
  absl::StatusOr<std::string> IdToToken(int32_t id) const;
  // Whether id is a special token (skipped by skip_special_tokens).
  bool IsSpecial(int32_t id) const;
  // The bytes id adds to decoded text when it follows other text (Decoder::TokenToBytes:
  // raw, possibly part of a character); nullopt for special tokens and unknown ids. What
  // grammar-constrained generation matches tokens by.
  std::optional<std::string> TokenBytes(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // Ids that end generation: eos_id plus generation_config.json's eos_token_id(s).
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const TokenizerConfig& config() const { return config_; }

  ChatFormat chat_format() const { return chat_format_; }
  // FormatChat with this tokenizer's format and BOS/EOS text; encode the result with
  // add_special_tokens = false.
  absl::StatusOr<std::string> ApplyChatTemplate(absl::Span<const ChatMessage> messages,
                                                bool add_generation_prompt = true) const;

 private:
  Tokenizer() = default;
  // The tokenizer.json `root` (its "model" ignored) around `model`; `pre_tokenizer`, when
  // not null, replaces root's.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromParts(const Json& root, std::unique_ptr<BpeModel> model,
                                                               TokenizerConfig config,
                                                               std::unique_ptr<PreTokenizer> pre_tokenizer = nullptr);
  absl::Status EncodeSection(std::string_view text, int section_index, std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  AddedTokens added_;
  StringSet added_contents_;    // every added token (ByteLevel decoder)
  StringSet special_contents_;  // special added + additional_special_tokens
  TokenizerConfig config_;
  bool llama_non_legacy_ = false;  // transformers' LlamaTokenizer with legacy = false
  std::optional<int32_t> bos_id_, eos_id_;
  std::vector<int32_t> stop_ids_;
  ChatFormat chat_format_ = ChatFormat::kNone;
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_TOKENIZER_H_
