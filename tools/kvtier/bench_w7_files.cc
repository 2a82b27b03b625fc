// Implementation of W7's GGUF cache (bench_w7_files.h).
#include "bench_w7_files.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "demo_model_path.h"
#include "gguf_output.h"
#include "model/checkpoint.h"
#include "model/gguf_export.h"
#include "model/gguf_file.h"
#include "model/random_checkpoint.h"
#include "tokenizer/byte_tokenizer_writer.h"
#include "tokenizer/gguf_tokenizer.h"

namespace kvtier::cli::bench {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<ModelConfig> SourceConfig(const W7Source& source) {
  if (!source.preset.empty()) {
    ASSIGN_OR_RETURN(RandomCheckpointSpec spec, RandomCheckpointPreset(source.preset));
    return RandomCheckpointConfig(spec);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(source.path));
  return checkpoint->config();
}

// A byte tokenizer's metadata: llama.cpp needs a vocabulary to load a model, and random
// checkpoints have none.
absl::StatusOr<GgufMetadata> ByteTokenizer(int64_t vocab) {
  return tokenizer::GgufTokenizerMetadata(tokenizer::ByteTokenizerJson(), tokenizer::ByteTokenizerConfigJson(), vocab);
}

// The preset's random weights as GGUF F16.
absl::Status WritePresetGguf(const std::string& preset, const std::string& path) {
  ASSIGN_OR_RETURN(RandomCheckpointSpec spec, RandomCheckpointPreset(preset));
  ASSIGN_OR_RETURN(ModelConfig config, RandomCheckpointConfig(spec));
  ASSIGN_OR_RETURN(std::vector<TensorToWrite> tensors, RandomCheckpointTensors(spec));
  GgufExportOptions options;
  options.type = DType::kF16;
  options.name = preset;
  ASSIGN_OR_RETURN(options.extra, ByteTokenizer(spec.vocab));
  return WriteGgufModel(config, tensors, path, options);
}

// `checkpoint` (a directory or GGUF file) as GGUF of `type`, as `kvtier convert` writes it.
absl::Status ConvertGguf(const std::string& checkpoint_path, const std::string& type, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(checkpoint_path));
  GgufExportOptions options;
  options.type = GgufTypeOf(type);
  options.name = fs::path(checkpoint_path).filename().replace_extension().string();
  ASSIGN_OR_RETURN(options.extra, CheckpointExtraMetadata(*checkpoint));
  const bool no_vocab = std::any_of(options.extra.begin(), options.extra.end(), [](const auto& key) {
    const std::string* model = key.second.AsString();
    return key.first == "tokenizer.ggml.model" && model != nullptr && *model == "no_vocab";
  });
  if (no_vocab) {
    ASSIGN_OR_RETURN(GgufMetadata bytes, ByteTokenizer(checkpoint->config().vocab_size));
    std::erase_if(options.extra, [](const auto& key) { return key.first.starts_with("tokenizer."); });
    options.extra.insert(options.extra.begin(), bytes.begin(), bytes.end());
  }
  return WriteGgufModel(checkpoint->config(), CheckpointTensorsToWrite(*checkpoint), path, options);
}

}  // namespace

absl::StatusOr<std::vector<W7Source>> W7Sources(const std::vector<std::string>& given) {
  std::vector<W7Source> sources;
  if (given.empty()) {
    const std::string demo = FindDemoModel();
    if (demo.empty()) {
      return absl::InvalidArgumentError(
          "W7 measures the demo model, which was not found (set KVTIER_DEMO_MODEL or pass --w7-model)");
    }
    sources.push_back({"demo", demo, ""});
    sources.push_back({kW7Preset, "", kW7Preset});
    return sources;
  }
  for (const std::string& path : given) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      if (absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(path); !gguf.ok()) {
        return absl::FailedPreconditionError(absl::StrCat("--w7-model: ", gguf.status().message()));
      }
    } else if (!fs::is_regular_file(fs::path(path) / "config.json", ec)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--w7-model: ", path, " is neither a checkpoint directory (it holds no config.json) nor a GGUF file"));
    }
    fs::path p = fs::path(path).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    sources.push_back({p.filename().replace_extension().string(), path, ""});
  }
  return sources;
}

std::string W7GgufPath(const std::string& cache_dir, const W7Source& source, const std::string& type) {
  return (fs::path(cache_dir) / absl::StrCat(source.name, "-", type, ".gguf")).string();
}

absl::StatusOr<int64_t> W7GgufBytes(const W7Source& source, const std::string& type) {
  ASSIGN_OR_RETURN(ModelConfig config, SourceConfig(source));
  const int64_t params = config.NumParameters();
  return (type == "q8_0" ? params * 34 / 32 : params * 2) + (int64_t{4} << 20);
}

absl::Status WriteW7Files(const std::vector<W7Source>& sources, const std::string& cache_dir, FILE* log) {
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("--w7-cache: cannot create ", cache_dir, ": ", ec.message()));
  for (const W7Source& source : sources) {
    for (const std::string& type : kW7Types) {
      const std::string path = W7GgufPath(cache_dir, source, type);
      if (fs::is_regular_file(path, ec)) continue;
      const std::string partial = path + ".partial";
      const auto start = std::chrono::steady_clock::now();
      absl::Status written;
      if (!source.preset.empty() && type == "f16") {
        written = WritePresetGguf(source.preset, partial);
      } else {
        // A preset's other types come from its F16 file (written first: kW7Types starts with f16).
        written = ConvertGguf(source.preset.empty() ? source.path : W7GgufPath(cache_dir, source, "f16"), type, partial);
      }
      if (!written.ok()) {
        fs::remove(partial, ec);
        return absl::Status(written.code(), absl::StrCat("W7: writing ", path, ": ", written.message()));
      }
      fs::rename(partial, path, ec);
      if (ec) return absl::InternalError(absl::StrCat("W7: renaming ", partial, ": ", ec.message()));
      std::fprintf(log, "bench: wrote %s (%.2f GB, %.1f s)\n", path.c_str(),
                   static_cast<double>(fs::file_size(path, ec)) / 1e9,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::cli::bench
