// Test helpers: small hand-made tokenizer.json files (byte-level and sentencepiece-style)
// and corpus reading. Not thread-safe (tests only).
#ifndef KVTIER_TESTS_TOKENIZER_TOKENIZER_TEST_UTIL_H_
#define KVTIER_TESTS_TOKENIZER_TOKENIZER_TEST_UTIL_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvtier::tokenizer::testing {

// Byte-level BPE: the 256 byte symbols (ids 0..255), merges building " the", "hello" and
// "12", the Llama-3 split pattern, special <|bos|> (1000, added by the template) and
// <|eot|> (1001), and a non-special "<tool>" (1002, lstrip + rstrip).
nlohmann::json ByteLevelTokenizerJson();

// Sentencepiece-style BPE: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> at 3..258, a few pieces
// ("▁", "h", "e", "l", "o", "▁h", "▁he", "ll", "llo", "▁hello", ...), Prepend/Replace
// normalizers, byte fallback, Replace/ByteFallback/Fuse/Strip decoders, BOS template.
nlohmann::json SentencePieceTokenizerJson();

// Lines of tests/tokenizer/corpus/corpus.jsonl (each a JSON string).
std::vector<std::string> ReadCorpus();

}  // namespace kvtier::tokenizer::testing

#endif  // KVTIER_TESTS_TOKENIZER_TOKENIZER_TEST_UTIL_H_
