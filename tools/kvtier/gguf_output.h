// What `kvtier convert --to gguf` and `kvtier mkmodel --format gguf` share: the tokenizer
// metadata a GGUF file carries, the --type flag, and the output file's checks (no overwrite
// without --force; its folder created).
// Stateless; not thread-safe (CLI only).
#ifndef KVTIER_TOOLS_KVTIER_GGUF_OUTPUT_H_
#define KVTIER_TOOLS_KVTIER_GGUF_OUTPUT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/gguf_types.h"

namespace kvtier::cli {

// The metadata a GGUF file of `checkpoint` carries beside the model's own: the tokenizer
// (a directory's tokenizer.json with tokenizer_config.json converted,
// tokenizer/gguf_tokenizer.h; tokenizer.ggml.model "no_vocab" when there is none) and the
// sampling defaults of its generation_config.json (model/gguf_model.h). A GGUF
// checkpoint's own tokenizer.*, general.sampling.* and kvtier.* keys are copied.
absl::StatusOr<GgufMetadata> CheckpointExtraMetadata(const Checkpoint& checkpoint);

// The choices of --type and the dtype each means (nullopt for "auto").
std::vector<std::string> GgufTypeChoices();
std::optional<DType> GgufTypeOf(const std::string& choice);

// "" when `path` may be written, else why not: it exists and `force` is false, or it is a
// directory, or its folder is missing and cannot be created. Creates the folder (as an
// output directory is created), so a new file can go into a new folder.
std::string PrepareGgufOutput(const std::string& path, bool force);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_GGUF_OUTPUT_H_
