// Running llama.cpp for the GGUF tests (llama_oracle.h).
#include "llama_oracle.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gguf_models.h"
#include "nlohmann/json.hpp"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kOracleDir = fs::path(KVTIER_SOURCE_DIR) / "tests/gguf/oracle";
const fs::path kBinaries = kOracleDir / "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";

fs::path Scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::path(GgufScratch()) / "oracle";
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::vector<json> JsonLines(const fs::path& path) {
  std::vector<json> lines;
  std::istringstream in(ReadFileText(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

// Runs the script; its output lines and (for generate/score) the probability rows.
absl::StatusOr<std::vector<json>> Run(const std::string& mode, const std::string& gguf, const std::string& input,
                                      LlamaDistributions* distributions) {
  static int counter = 0;
  const fs::path in = Scratch() / absl::StrCat(mode, ++counter, ".in");
  const fs::path out = Scratch() / absl::StrCat(mode, counter, ".out");
  const fs::path log = Scratch() / absl::StrCat(mode, counter, ".log");
  if (mode == "tokenize") {
    fs::copy_file(input, in, fs::copy_options::overwrite_existing);
  } else {
    std::ofstream(in) << input;
  }
  const std::string command = absl::StrCat("node \"", (kOracleDir / "llama_oracle.mjs").string(), "\" ", mode, " \"", gguf,
                                           "\" \"", in.string(), "\" \"", out.string(), "\" > \"", log.string(), "\" 2>&1");
  if (std::system(command.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("llama.cpp oracle failed: ", command, "\n", ReadFileText(log)));
  }
  std::vector<json> lines = JsonLines(out);
  if (distributions != nullptr && !lines.empty()) {
    distributions->vocab = lines[0]["vocab"].get<int64_t>();
    const std::string bytes = ReadFileText(out.string() + ".probs");
    const size_t row_bytes = static_cast<size_t>(distributions->vocab) * sizeof(float);
    for (size_t at = 0; row_bytes > 0 && at + row_bytes <= bytes.size(); at += row_bytes) {
      std::vector<float> row(static_cast<size_t>(distributions->vocab));
      std::memcpy(row.data(), bytes.data() + at, row_bytes);
      distributions->probs.push_back(std::move(row));
    }
    lines.erase(lines.begin());
  }
  return lines;
}

}  // namespace

std::optional<std::string> LlamaOracleMissing() {
  if (!fs::exists(kOracleDir / "node_modules/node-llama-cpp/package.json") || !fs::exists(kBinaries)) {
    return absl::StrCat("llama.cpp oracle not installed (", kOracleDir.string(),
                        "/node_modules missing); run scripts/setup-oracles.sh");
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) return std::string("node is not installed");
  return std::nullopt;
}

absl::StatusOr<LlamaDistributions> LlamaGenerate(const std::string& gguf,
                                                 const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  LlamaDistributions d;
  const json request = {{"prompts", prompts}, {"max_tokens", max_tokens}};
  absl::StatusOr<std::vector<json>> lines = Run("generate", gguf, request.dump(), &d);
  if (!lines.ok()) return lines.status();
  for (const json& line : *lines) d.tokens.push_back(line["tokens"].get<std::vector<int32_t>>());
  return d;
}

absl::StatusOr<LlamaDistributions> LlamaScore(const std::string& gguf,
                                              const std::vector<std::vector<int32_t>>& sequences) {
  LlamaDistributions d;
  const json request = {{"sequences", sequences}};
  absl::StatusOr<std::vector<json>> lines = Run("score", gguf, request.dump(), &d);
  if (!lines.ok()) return lines.status();
  for (const json& line : *lines) d.positions.push_back(line["positions"].get<int64_t>());
  return d;
}

absl::StatusOr<LlamaTokens> LlamaTokenize(const std::string& gguf, const std::string& corpus) {
  absl::StatusOr<std::vector<json>> lines = Run("tokenize", gguf, corpus, nullptr);
  if (!lines.ok()) return lines.status();
  if (lines->empty()) return absl::InternalError("llama.cpp oracle wrote nothing");
  LlamaTokens t;
  const json& head = (*lines)[0];
  t.add_bos = head["add_bos"].get<bool>();
  t.add_eos = head["add_eos"].get<bool>();
  if (head["bos"].is_number_integer()) t.bos = head["bos"].get<int32_t>();
  if (head["eos"].is_number_integer()) t.eos = head["eos"].get<int32_t>();
  for (size_t i = 1; i < lines->size(); ++i) {
    t.special.push_back((*lines)[i]["special"].get<std::vector<int32_t>>());
    t.text.push_back((*lines)[i]["text"].get<std::vector<int32_t>>());
  }
  return t;
}

namespace {

// llama.h's llama_model_quantize_params of the pinned node-llama-cpp (3.21.1) build.
struct QuantizeParams {
  int32_t nthread;
  int32_t ftype;
  int32_t output_tensor_type;
  int32_t token_embedding_type;
  bool allow_requantize;
  bool quantize_output_tensor;
  bool only_copy;
  bool pure;
  bool keep_split;
  bool dry_run;
  const void* imatrix;
  const void* kv_overrides;
  const void* tt_overrides;
  const int32_t* prune_layers;
  size_t max_buf_size;
};

}  // namespace

absl::Status LlamaQuantize(const std::string& in, const std::string& out, int ftype) {
  fs::path library;
  for (const auto& entry : fs::directory_iterator(kBinaries)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("libllama.") && name.ends_with(".so")) library = entry.path();
  }
  if (library.empty()) return absl::NotFoundError(absl::StrCat("no libllama in ", kBinaries.string()));
  // In a child process: llama.cpp's library stays out of this one (and out of its leak
  // checks), and its progress on stderr out of the test log.
  fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) return absl::InternalError("fork failed");
  if (child == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) _exit(101);
    using Defaults = QuantizeParams (*)();
    using Quantize = uint32_t (*)(const char*, const char*, const QuantizeParams*);
    using Init = void (*)();
    auto defaults = reinterpret_cast<Defaults>(dlsym(handle, "llama_model_quantize_default_params"));
    auto quantize = reinterpret_cast<Quantize>(dlsym(handle, "llama_model_quantize"));
    auto init = reinterpret_cast<Init>(dlsym(handle, "llama_backend_init"));
    if (defaults == nullptr || quantize == nullptr || init == nullptr) _exit(102);
    init();
    QuantizeParams params = defaults();
    params.ftype = ftype;
    params.nthread = 2;
    params.allow_requantize = true;  // also dequantizing (ftype 0, all F32)
    _exit(quantize(in.c_str(), out.c_str(), &params) == 0 ? 0 : 103);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("llama_model_quantize(", in, ", ftype ", ftype, ") failed in ",
                                            library.string(), " (status ", status, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::testing
