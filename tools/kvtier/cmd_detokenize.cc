// `kvtier detokenize`: a line-oriented filter over a tokenizer.json, one JSON array of token
// ids per line on stdin to one JSON string per line. Not thread-safe (CLI only).
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "command_line.h"
#include "load_tokenizer.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

constexpr char kDetokenizeDescription[] =
    "Reads one JSON array of token ids per line on stdin and prints the decoded text of\n"
    "each as one JSON string per line. --skip-special leaves special tokens out.";

// The ids of one line, or nullopt when it is not a JSON array of 32-bit integers.
std::optional<std::vector<int32_t>> ParseIdsLine(const std::string& line) {
  nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return std::nullopt;
  std::vector<int32_t> ids;
  for (const auto& id : parsed) {
    if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
      return std::nullopt;
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

int DetokenizeMain(int argc, char** argv) {
  CommandLine cl("detokenize", kDetokenizeDescription);
  std::string path;
  bool skip_special = false;
  cl.AddString("--tokenizer", &path, "tokenizer.json, the directory holding it, or a .gguf file", "FILE|DIR")
      ->required();
  cl.AddSwitch("--skip-special", &skip_special, "leave special tokens out of the text");
  if (auto status = cl.Parse(argc, argv)) return *status;
  auto tok = LoadTokenizerFlag(path);
  if (!tok.ok()) return cl.Fail(kExitFailure, tok.status().message());
  tokenizer::DecodeOptions options;
  options.skip_special_tokens = skip_special;
  std::string line;
  int line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    std::optional<std::vector<int32_t>> ids = ParseIdsLine(line);
    if (!ids) return cl.Fail(kExitFailure, absl::StrCat("line ", line_number, ": expected a JSON array of token ids"));
    auto text = (*tok)->Decode(*ids, options);
    if (!text.ok()) return cl.Fail(kExitFailure, absl::StrCat("line ", line_number, ": ", text.status().message()));
    std::string out = nlohmann::json(*text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return kExitOk;
}

}  // namespace

KVTIER_REGISTER_COMMAND("detokenize", "JSON token id arrays on stdin -> JSON strings", DetokenizeMain);

}  // namespace kvtier::cli
