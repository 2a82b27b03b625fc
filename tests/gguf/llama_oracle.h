// llama.cpp as a reference for the GGUF tests: node-llama-cpp's prebuilt CPU build of it,
// installed in tests/gguf/oracle by scripts/setup-oracles.sh, run through
// tests/gguf/oracle/llama_oracle.mjs on GGUF files; and llama.cpp's own quantizer, called
// in its shared library. Test-only; not thread-safe.
#ifndef KVTIER_TESTS_GGUF_LLAMA_ORACLE_H_
#define KVTIER_TESTS_GGUF_LLAMA_ORACLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::testing {

// nullopt when node and the oracle are installed; otherwise what is missing and how to
// install it (the tests skip with this message).
std::optional<std::string> LlamaOracleMissing();

// Distributions over the vocabulary, one row per position, llama.cpp's softmax.
struct LlamaDistributions {
  int64_t vocab = 0;
  std::vector<std::vector<int32_t>> tokens;  // generate: each prompt's greedy tokens
  std::vector<int64_t> positions;            // score: rows per sequence
  std::vector<std::vector<float>> probs;     // all rows, in order
};

// Greedy continuation of each prompt (EOS not stopping it) and the distribution before
// each generated token.
absl::StatusOr<LlamaDistributions> LlamaGenerate(const std::string& gguf,
                                                 const std::vector<std::vector<int32_t>>& prompts, int max_tokens);
// The distribution after each token of each sequence.
absl::StatusOr<LlamaDistributions> LlamaScore(const std::string& gguf,
                                              const std::vector<std::vector<int32_t>>& sequences);

struct LlamaTokens {
  bool add_bos = false, add_eos = false;
  std::optional<int32_t> bos, eos;
  std::vector<std::vector<int32_t>> special;  // special tokens parsed, nothing added
  std::vector<std::vector<int32_t>> text;     // special tokens left as text, nothing added
};
// llama.cpp's tokenization of each line of `corpus` (one JSON string per line).
absl::StatusOr<LlamaTokens> LlamaTokenize(const std::string& gguf, const std::string& corpus);

// llama.cpp's quantizer (llama_model_quantize) from GGUF `in` to `out`; `ftype` is its
// LLAMA_FTYPE (0 all F32, which dequantizes a quantized file; 2 Q4_0, 7 Q8_0, 15 Q4_K_M,
// 17 Q5_K_M, 18 Q6_K).
absl::Status LlamaQuantize(const std::string& in, const std::string& out, int ftype);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_GGUF_LLAMA_ORACLE_H_
