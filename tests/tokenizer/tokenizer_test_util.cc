// Test helpers: hand-made tokenizer.json fixtures.
#include "tokenizer_test_util.h"

#include <fstream>

#include "absl/strings/str_format.h"
#include "tokenizer/byte_level.h"

namespace kvtier::tokenizer::testing {

using nlohmann::json;

namespace {

std::string ByteChars(std::string_view text) {
  std::string out;
  ByteLevelTable::Get().Encode(text, &out);
  return out;
}

}  // namespace

json ByteLevelTokenizerJson() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChars(std::string(1, static_cast<char>(b)))] = b;
  // Merges in rank order; their results get ids from 256 on.
  std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "t"}, {"h", "e"}, {" t", "he"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"1", "2"}};
  json merges_json = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    std::string left = ByteChars(a), right = ByteChars(b);
    merges_json.push_back(left + " " + right);
    if (!vocab.contains(left + right)) vocab[left + right] = next++;
  }
  json added = json::array({
      {{"id", 1000}, {"content", "<|bos|>"}, {"special", true}},
      {{"id", 1001}, {"content", "<|eot|>"}, {"special", true}},
      {{"id", 1002}, {"content", "<tool>"}, {"special", false}, {"lstrip", true}, {"rstrip", true}},
  });
  return json{
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"},
                       {"pattern",
                        {{"Regex",
                          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {1000}}, {"tokens", {"<|bos|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges_json}, {"ignore_merges", false}}},
  };
}

json SentencePieceTokenizerJson() {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) vocab[absl::StrFormat("<0x%02X>", b)] = 3 + b;
  int next = 259;
  for (const char* piece : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d"}) vocab[piece] = next++;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"\xE2\x96\x81", "h"}, {"l", "l"}, {"\xE2\x96\x81h", "e"}, {"ll", "o"},
      {"\xE2\x96\x81he", "llo"}, {"\xE2\x96\x81", "w"}, {"o", "r"}, {"\xE2\x96\x81w", "or"},
      {"l", "d"}, {"\xE2\x96\x81wor", "ld"}, {"\xE2\x96\x81", "\xE2\x96\x81"}};
  json merges_json = json::array();
  for (const auto& [a, b] : merges) {
    merges_json.push_back(json::array({a, b}));  // the newer [a, b] form
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
  }
  json added = json::array({
      {{"id", 0}, {"content", "<unk>"}, {"special", true}},
      {{"id", 1}, {"content", "<s>"}, {"special", true}},
      {{"id", 2}, {"content", "</s>"}, {"special", true}},
  });
  return json{
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                     {{"type", "Replace"},
                                      {"pattern", {{"String", " "}}},
                                      {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges_json}, {"unk_token", "<unk>"},
        {"fuse_unk", true}, {"byte_fallback", true}}},
  };
}

std::vector<std::string> ReadCorpus() {
  std::ifstream in(std::string(KVTIER_SOURCE_DIR) + "/tests/tokenizer/corpus/corpus.jsonl");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(json::parse(line).get<std::string>());
  }
  return lines;
}

}  // namespace kvtier::tokenizer::testing
