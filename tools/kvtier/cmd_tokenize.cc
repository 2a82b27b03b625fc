// `kvtier tokenize` / `kvtier detokenize`: line-oriented filters over a tokenizer.json,
// text lines to JSON id arrays and back. Not thread-safe (CLI only).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "args.h"
#include "command.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace kvtier::cli {
namespace {

using tokenizer::Tokenizer;

void PrintTokenizeHelp() {
  std::printf(
      "usage: kvtier tokenize --tokenizer FILE|DIR [--no-special]\n\n"
      "Reads UTF-8 lines on stdin and prints one JSON array of token ids per line.\n"
      "FILE is a tokenizer.json (tokenizer_config.json beside it is read too); a DIR\n"
      "means DIR/tokenizer.json. Special-token strings such as <|im_end|> become their\n"
      "ids and the tokenizer's template (e.g. BOS) is applied; --no-special does neither.\n");
}

void PrintDetokenizeHelp() {
  std::printf(
      "usage: kvtier detokenize --tokenizer FILE|DIR [--skip-special]\n\n"
      "Reads one JSON array of token ids per line on stdin and prints the decoded text of\n"
      "each as one JSON string per line. --skip-special leaves special tokens out.\n");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const Args& args) {
  std::optional<std::string> path = args.Get("tokenizer");
  if (!path) return absl::InvalidArgumentError("--tokenizer FILE is required");
  std::error_code ec;
  if (std::filesystem::is_directory(*path, ec)) return Tokenizer::FromDirectory(*path);
  return Tokenizer::FromFile(*path);
}

int RunTokenize(int argc, char** argv) {
  auto args = Args::Parse(argc, argv, {"tokenizer"}, {"no-special", "help"});
  if (!args.ok()) {
    std::fprintf(stderr, "kvtier tokenize: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->Has("help")) {
    PrintTokenizeHelp();
    return 0;
  }
  auto tok = LoadTokenizer(*args);
  if (!tok.ok()) {
    std::fprintf(stderr, "kvtier tokenize: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  const bool special = !args->Has("no-special") || args->GetOr("no-special", "true") == "false";
  tokenizer::EncodeOptions options{special, special};
  std::string line;
  int line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    auto ids = (*tok)->Encode(line, options);
    if (!ids.ok()) {
      std::fprintf(stderr, "kvtier tokenize: line %d: %s\n", line_number,
                   std::string(ids.status().message()).c_str());
      return 1;
    }
    std::string out = nlohmann::json(*ids).dump();
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

int RunDetokenize(int argc, char** argv) {
  auto args = Args::Parse(argc, argv, {"tokenizer"}, {"skip-special", "help"});
  if (!args.ok()) {
    std::fprintf(stderr, "kvtier detokenize: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->Has("help")) {
    PrintDetokenizeHelp();
    return 0;
  }
  auto tok = LoadTokenizer(*args);
  if (!tok.ok()) {
    std::fprintf(stderr, "kvtier detokenize: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  tokenizer::DecodeOptions options;
  options.skip_special_tokens = args->Has("skip-special") && args->GetOr("skip-special", "true") != "false";
  std::string line;
  int line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::vector<int32_t> ids;
    bool valid = parsed.is_array();
    for (const auto& id : valid ? parsed : nlohmann::json::array()) {
      if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
        valid = false;
        break;
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    if (!valid) {
      std::fprintf(stderr, "kvtier detokenize: line %d: expected a JSON array of token ids\n", line_number);
      return 1;
    }
    auto text = (*tok)->Decode(ids, options);
    if (!text.ok()) {
      std::fprintf(stderr, "kvtier detokenize: line %d: %s\n", line_number,
                   std::string(text.status().message()).c_str());
      return 1;
    }
    std::string out = nlohmann::json(*text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

}  // namespace

KVTIER_REGISTER_COMMAND("tokenize", "text lines on stdin -> JSON token id arrays", RunTokenize);
KVTIER_REGISTER_COMMAND("detokenize", "JSON token id arrays on stdin -> JSON strings", RunDetokenize);

}  // namespace kvtier::cli
