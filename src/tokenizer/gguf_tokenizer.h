// Tokenizers in GGUF: the tokenizer.* metadata llama.cpp reads, both ways.
//
// Reading (Tokenizer::FromGguf) builds the tokenizer llama.cpp builds from the same keys,
// out of kvtier's tokenizer.json parts, so that a GGUF file encodes as llama.cpp encodes
// it: "gpt2" models (byte-level BPE, tokenizer.ggml.merges) with the pre-tokenizer
// tokenizer.ggml.pre names (gpt-2/default, llama-bpe and its aliases, qwen2), and "llama"
// models (sentencepiece BPE over tokenizer.ggml.scores, byte fallback, a space prefix
// unless tokenizer.ggml.add_space_prefix is false). Control, unknown and user-defined
// tokens (tokenizer.ggml.token_type) are found in the text before BPE; control and
// unknown ones only when special tokens are parsed; as in llama.cpp, tokens whose text marks
// an end of generation (<|im_end|>, <|eot_id|>, </s>, ...) are control tokens whatever their
// type. BOS/EOS are added as tokenizer.ggml.add_bos_token / add_eos_token say, with
// llama.cpp's defaults when absent. The pre-tokenizer's \s is Unicode's White_Space, as in
// llama.cpp (transformers' is JavaScript's). End of generation: EOS,
// tokenizer.ggml.eot_token_id and eom_token_id, and those end-of-generation tokens.
//
// Writing (GgufTokenizerMetadata) turns a tokenizer.json that kvtier reads into those keys
// as llama.cpp's converter writes them, for `kvtier convert --to gguf`.
// Stateless functions; thread-safe.
#ifndef KVTIER_TOKENIZER_GGUF_TOKENIZER_H_
#define KVTIER_TOKENIZER_GGUF_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/gguf_types.h"

namespace kvtier::tokenizer {

// tokenizer.ggml.token_type values.
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A pre-tokenizer of llama.cpp's that kvtier implements, by its tokenizer.ggml.pre name.
struct GgufPreTokenizer {
  std::string_view name;
  // The tokenizer.json regex llama.cpp's expressions implement (split_regex.h), whose \s
  // is Unicode's White_Space there.
  std::string_view regex;
  bool ignore_merges = false;  // a whole word that is a token is that token
  bool add_bos = false;        // llama.cpp's default for tokenizer.ggml.add_bos_token
  // Decoding removes the space before punctuation (llama.cpp's clean_spaces; kvtier applies
  // transformers' clean_up_tokenization_spaces, which differs in rare contractions).
  bool clean_spaces = false;
};

// nullptr for a name kvtier does not implement. An absent tokenizer.ggml.pre is "default".
const GgufPreTokenizer* FindGgufPreTokenizer(std::string_view name);

// The tokenizer.* metadata of a tokenizer.json (and its tokenizer_config.json, which may be
// empty) for a model of `vocab_size` tokens (ids the tokenizer lacks become unused
// "[PAD<id>]" tokens). Byte-level BPE becomes "gpt2" with the pre-tokenizer whose regex
// its Split (or ByteLevel) uses; BPE with byte fallback becomes "llama" with scores from the
// merge ranks, so llama.cpp merges as the tokenizer.json does. Unimplemented naming what has
// no GGUF form (another model type, a pre-tokenizer of none of the forms above);
// InvalidArgument for a malformed file or a vocabulary larger than vocab_size.
absl::StatusOr<GgufMetadata> GgufTokenizerMetadata(std::string_view tokenizer_json,
                                                   std::string_view tokenizer_config_json, int64_t vocab_size);

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_GGUF_TOKENIZER_H_
