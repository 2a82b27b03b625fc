// A minimal byte-level BPE tokenizer.json for random-weight test and demo models: ids
// 0..255 are the bytes, then <|begin_of_text|> and <|end_of_text|>; no merges. Real
// checkpoints ship their own tokenizer.json. Stateless; thread-safe.
#ifndef KVTIER_TOKENIZER_BYTE_TOKENIZER_WRITER_H_
#define KVTIER_TOKENIZER_BYTE_TOKENIZER_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kvtier::tokenizer {

inline constexpr int32_t kByteTokenizerBosId = 256;
inline constexpr int32_t kByteTokenizerEosId = 257;
inline constexpr int32_t kByteTokenizerVocabSize = 258;

// The tokenizer.json text.
std::string ByteTokenizerJson();
// The tokenizer_config.json text.
std::string ByteTokenizerConfigJson();
// Writes tokenizer.json and tokenizer_config.json into directory (which must exist).
absl::Status WriteByteTokenizer(const std::string& directory);

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_BYTE_TOKENIZER_WRITER_H_
