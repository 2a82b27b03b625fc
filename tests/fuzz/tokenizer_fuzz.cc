// Fuzzes tokenizer.json loading and, when a tokenizer loads, Encode/Decode.
// Input: tokenizer.json text, optionally followed by "\n\x00\x00\n" and text to encode.
// Also fuzzes Encode/Decode of the built-in byte tokenizer with the raw input as text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/byte_tokenizer_writer.h"
#include "tokenizer/tokenizer.h"

namespace {

void RoundTrip(const kvtier::tokenizer::Tokenizer& tok, std::string_view text) {
  for (bool special : {false, true}) {
    kvtier::tokenizer::EncodeOptions eo;
    eo.add_special_tokens = special;
    eo.parse_special = special;
    auto ids = tok.Encode(text, eo);
    if (!ids.ok()) continue;
    kvtier::tokenizer::DecodeOptions d;
    d.skip_special_tokens = special;
    (void)tok.Decode(*ids, d);
  }
  // Ids straight from the input bytes, including out-of-vocabulary ones.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < text.size() && raw.size() < 64; i += 2) {
    raw.push_back(static_cast<int16_t>(static_cast<uint8_t>(text[i]) | (static_cast<uint8_t>(text[i + 1]) << 8)));
  }
  (void)tok.Decode(raw);
  const int32_t n = tok.vocab_size();
  for (int32_t id : {-1, 0, n - 1, n}) (void)tok.IdToToken(id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  static const auto byte_tok = [] {
    auto t = kvtier::tokenizer::Tokenizer::FromJson(kvtier::tokenizer::ByteTokenizerJson());
    if (!t.ok()) std::abort();
    return std::move(*t);
  }();
  RoundTrip(*byte_tok, input.substr(0, 4096));

  std::string_view json = input;
  std::string_view text = "Hello, world! <s> héllo\n\t 123 <|im_end|>";
  const size_t sep = input.find(std::string_view("\n\0\0\n", 4));
  if (sep != std::string_view::npos) {
    json = input.substr(0, sep);
    text = input.substr(sep + 4);
  }
  auto tok = kvtier::tokenizer::Tokenizer::FromJson(json);
  if (tok.ok()) RoundTrip(**tok, text.substr(0, 4096));
  return 0;
}
