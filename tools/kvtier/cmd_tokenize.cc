// `kvtier tokenize`: a line-oriented filter over a tokenizer.json, UTF-8 text lines on stdin
// to one JSON array of token ids per line. Not thread-safe (CLI only).
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "command_line.h"
#include "load_tokenizer.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

constexpr char kTokenizeDescription[] =
    "Reads UTF-8 lines on stdin and prints one JSON array of token ids per line.\n"
    "FILE is a tokenizer.json (tokenizer_config.json beside it is read too) or a .gguf\n"
    "file (its tokenizer, encoding as llama.cpp does); a DIR means DIR/tokenizer.json.\n"
    "Special-token strings such as <|im_end|> become their\n"
    "ids and the tokenizer's template (e.g. BOS) is applied; --no-special does neither.";

int TokenizeMain(int argc, char** argv) {
  CommandLine cl("tokenize", kTokenizeDescription);
  std::string path;
  bool no_special = false;
  cl.AddString("--tokenizer", &path, "tokenizer.json, the directory holding it, or a .gguf file", "FILE|DIR")
      ->required();
  cl.AddSwitch("--no-special", &no_special, "special-token strings stay text; no template");
  if (auto status = cl.Parse(argc, argv)) return *status;
  auto tok = LoadTokenizerFlag(path);
  if (!tok.ok()) return cl.Fail(kExitFailure, tok.status().message());
  const tokenizer::EncodeOptions options{!no_special, !no_special};
  std::string line;
  int line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    auto ids = (*tok)->Encode(line, options);
    if (!ids.ok()) return cl.Fail(kExitFailure, absl::StrCat("line ", line_number, ": ", ids.status().message()));
    std::string out = nlohmann::json(*ids).dump();
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return kExitOk;
}

}  // namespace

KVTIER_REGISTER_COMMAND("tokenize", "text lines on stdin -> JSON token id arrays", TokenizeMain);

}  // namespace kvtier::cli
