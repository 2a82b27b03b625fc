// GGUF output helpers of the CLI (gguf_output.h).
#include "gguf_output.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"
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

absl::StatusOr<GgufMetadata> CheckpointExtraMetadata(const Checkpoint& checkpoint) {
  if (const GgufFile* gguf = checkpoint.gguf()) {
    GgufMetadata keys;
    for (const auto& [key, value] : gguf->metadata()) {
      if (key.starts_with("tokenizer.") || key.starts_with("general.sampling.") || key.starts_with("kvtier.")) {
        keys.emplace_back(key, value);
      }
    }
    return keys;
  }
  const fs::path dir(checkpoint.path());
  GgufMetadata keys;
  if (const std::optional<std::string> json = ReadIfPresent(dir / "tokenizer.json")) {
    absl::StatusOr<GgufMetadata> tokenizer = tokenizer::GgufTokenizerMetadata(
        *json, ReadIfPresent(dir / "tokenizer_config.json").value_or(""), checkpoint.config().vocab_size);
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat((dir / "tokenizer.json").string(), ": ", tokenizer.status().message()));
    }
    keys = *std::move(tokenizer);
  } else {
    keys.emplace_back("tokenizer.ggml.model", GgufValue::String("no_vocab"));
  }
  if (const std::optional<std::string> generation = ReadIfPresent(dir / "generation_config.json")) {
    absl::StatusOr<GgufMetadata> sampling = GgufGenerationMetadata(*generation);
    if (!sampling.ok()) {
      return absl::Status(sampling.status().code(),
                          absl::StrCat((dir / "generation_config.json").string(), ": ", sampling.status().message()));
    }
    keys.insert(keys.end(), sampling->begin(), sampling->end());
  }
  return keys;
}

std::vector<std::string> GgufTypeChoices() { return {"auto", "f32", "f16", "bf16", "q8_0", "q4_k"}; }

std::optional<DType> GgufTypeOf(const std::string& choice) {
  if (choice == "f32") return DType::kF32;
  if (choice == "f16") return DType::kF16;
  if (choice == "bf16") return DType::kBF16;
  if (choice == "q8_0") return DType::kQ8_0;
  if (choice == "q4_k") return DType::kQ4_K;
  return std::nullopt;
}

std::string PrepareGgufOutput(const std::string& path, bool force) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) return absl::StrCat("--out: ", path, " is a directory; give the .gguf file to write");
    if (!force) return absl::StrCat("--out: ", path, " exists; pass --force to replace it");
    return "";
  }
  const fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) return "";
  fs::create_directories(folder, ec);
  if (ec) return absl::StrCat("--out: cannot create the folder ", folder.string(), ": ", ec.message());
  return "";
}

}  // namespace kvtier::cli
