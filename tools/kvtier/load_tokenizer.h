// LoadTokenizerFlag: the --tokenizer FILE|DIR|GGUF argument of `kvtier tokenize` and
// `kvtier detokenize`. Stateless.
#ifndef KVTIER_TOOLS_KVTIER_LOAD_TOKENIZER_H_
#define KVTIER_TOOLS_KVTIER_LOAD_TOKENIZER_H_

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace kvtier::cli {

// A directory means DIR/tokenizer.json (and its tokenizer_config.json); a file ending in
// .gguf is a GGUF file's tokenizer; anything else is the tokenizer.json file itself.
inline absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizerFlag(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return tokenizer::Tokenizer::FromDirectory(path);
  if (path.ends_with(".gguf")) return tokenizer::Tokenizer::FromGgufFile(path);
  return tokenizer::Tokenizer::FromFile(path);
}

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_LOAD_TOKENIZER_H_
