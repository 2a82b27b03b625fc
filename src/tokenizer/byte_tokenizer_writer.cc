// Implementation of the byte-level test tokenizer writer.
#include "tokenizer/byte_tokenizer_writer.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tokenizer/byte_level.h"

namespace kvtier::tokenizer {
namespace {

nlohmann::json Special(int32_t id, const std::string& content) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

}  // namespace

std::string ByteTokenizerJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    const char byte = static_cast<char>(b);
    ByteLevelTable::Get().Encode(std::string_view(&byte, 1), &symbol);
    vocab[symbol] = b;
  }
  const std::string bos = "<|begin_of_text|>", eos = "<|end_of_text|>";
  nlohmann::json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {Special(kByteTokenizerBosId, bos), Special(kByteTokenizerEosId, eos)}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", {kByteTokenizerBosId}}, {"tokens", {bos}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", nlohmann::json::array()}}},
  };
  return j.dump();
}

std::string ByteTokenizerConfigJson() {
  const nlohmann::json config = {{"bos_token", "<|begin_of_text|>"},
                                 {"eos_token", "<|end_of_text|>"},
                                 {"add_bos_token", true},
                                 {"clean_up_tokenization_spaces", false},
                                 {"tokenizer_class", "PreTrainedTokenizerFast"}};
  return config.dump(2);
}

absl::Status WriteByteTokenizer(const std::string& directory) {
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"tokenizer.json", ByteTokenizerJson()},
                                   {"tokenizer_config.json", ByteTokenizerConfigJson()}}) {
    std::ofstream out(directory + "/" + name, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return absl::Status(absl::StatusCode::kUnknown, absl::StrCat("cannot write ", directory, "/", name));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::tokenizer
