// `kvtier convert`: writes a checkpoint (an HF directory, or a GGUF file) as a GGUF file
// that llama.cpp loads, with its tokenizer. Runs once per process; not thread-safe.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "command_line.h"
#include "gguf_output.h"
#include "model/checkpoint.h"
#include "model/gguf_export.h"
#include "progress_bar.h"

namespace kvtier::cli {
namespace {

constexpr char kConvertDescription[] =
    "Writes the model at --model (an HF checkpoint directory or a GGUF file) as a GGUF file\n"
    "llama.cpp loads: llama.cpp's tensor names and Q/K row order, its hyperparameter keys,\n"
    "the tokenizer (tokenizer.json converted to tokenizer.ggml.*) and the sampling defaults\n"
    "of generation_config.json (general.sampling.*, and the file as kvtier.generation_config).\n"
    "--type sets the type\n"
    "of the matrices (auto keeps F32/F16/BF16 as they are, anything else becomes F32); norms\n"
    "and biases stay F32. --out is written via a temporary file, and an existing file is\n"
    "replaced only with --force.";

int ConvertMain(int argc, char** argv) {
  CommandLine cl("convert", kConvertDescription);
  std::string model, to, out, type = "auto";
  bool force = false;
  cl.AddString("--model", &model, "HF checkpoint directory or GGUF file (or demo)", "DIR|FILE")->required();
  cl.AddChoice("--to", &to, {"gguf"}, "output format")->required();
  cl.AddString("--out", &out, "the file to write (its folder created)", "FILE")->required();
  cl.AddChoice("--type", &type, GgufTypeChoices(), "type of the weight matrices (default auto)");
  cl.AddSwitch("--force", &force, "replace an existing --out");
  if (auto status = cl.Parse(argc, argv)) return *status;
  if (std::string refusal = PrepareGgufOutput(out, force); !refusal.empty()) return cl.Fail(kExitFailure, refusal);
  std::error_code ec;
  if (std::filesystem::equivalent(model, out, ec)) return cl.Fail(kExitFailure, "--out is the --model file itself");

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint;
  {
    ProgressBar loading("loading " + model);
    checkpoint = Checkpoint::Open(model, [&loading](std::string_view stage, int64_t done, int64_t total) {
      loading.Update(std::string(stage), done, total);
      return true;
    });
  }
  if (!checkpoint.ok()) return cl.Fail(kExitFailure, checkpoint.status().message());
  absl::StatusOr<GgufMetadata> extra = CheckpointExtraMetadata(**checkpoint);
  if (!extra.ok()) return cl.Fail(kExitFailure, extra.status().message());

  GgufExportOptions options;
  options.type = GgufTypeOf(type);
  options.name = std::filesystem::path(model).filename().replace_extension().string();
  options.extra = *std::move(extra);
  ProgressBar writing("writing " + out);
  options.progress = [&writing](std::string_view stage, int64_t done, int64_t total) {
    writing.Update(std::string(stage), done, total);
    return true;
  };
  const std::vector<TensorToWrite> tensors = CheckpointTensorsToWrite(**checkpoint);
  absl::Status written = WriteGgufModel((*checkpoint)->config(), tensors, out, options);
  writing.Finish();
  if (!written.ok()) return cl.Fail(kExitFailure, written.message());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s, %zu tensors, %.2f GB, %.1f s\n", out.c_str(),
              std::string(ArchitectureName((*checkpoint)->config().architecture)).c_str(), tensors.size(),
              static_cast<double>(std::filesystem::file_size(out, ec)) / 1e9, seconds);
  return kExitOk;
}

}  // namespace

KVTIER_REGISTER_COMMAND("convert", "write a checkpoint as a GGUF file llama.cpp loads", ConvertMain);

}  // namespace kvtier::cli
