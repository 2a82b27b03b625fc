// GGUF output helpers of the CLI (gguf_output.h).
#include "gguf_output.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf_file.h"
#include "tokenizer/gguf_tokenizer.h"

namespace kvtier::cli {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> ReadIfPresent(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<GgufMetadata> CheckpointTokenizerMetadata(const Checkpoint& checkpoint) {
  if (const GgufFile* gguf = checkpoint.gguf()) {
    GgufMetadata keys;
    for (const auto& [key, value] : gguf->metadata()) {
      if (key.starts_with("tokenizer.")) keys.emplace_back(key, value);
    }
    return keys;
  }
  const fs::path dir(checkpoint.path());
  const std::optional<std::string> json = ReadIfPresent(dir / "tokenizer.json");
  if (!json.has_value()) return GgufMetadata{{"tokenizer.ggml.model", GgufValue::String("no_vocab")}};
  absl::StatusOr<GgufMetadata> keys = tokenizer::GgufTokenizerMetadata(
      *json, ReadIfPresent(dir / "tokenizer_config.json").value_or(""), checkpoint.config().vocab_size);
  if (!keys.ok()) {
    return absl::Status(keys.status().code(), absl::StrCat((dir / "tokenizer.json").string(), ": ", keys.status().message()));
  }
  return keys;
}

std::vector<std::string> GgufTypeChoices() { return {"auto", "f32", "f16", "bf16", "q8_0"}; }

std::optional<DType> GgufTypeOf(const std::string& choice) {
  if (choice == "f32") return DType::kF32;
  if (choice == "f16") return DType::kF16;
  if (choice == "bf16") return DType::kBF16;
  if (choice == "q8_0") return DType::kQ8_0;
  return std::nullopt;
}

std::string CheckGgufOutput(const std::string& path, bool force) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return "";
  if (fs::is_directory(st)) return absl::StrCat("--out: ", path, " is a directory; give the .gguf file to write");
  if (!force) return absl::StrCat("--out: ", path, " exists; pass --force to replace it");
  return "";
}

}  // namespace kvtier::cli
