// Structured-output benchmarks of `kvtier bench`:
//  - --grammar-mask: the cost of grammar-constrained decoding on the CPU, per tokenizer, over
//    a corpus of JSON schemas and GBNF grammars — compile time, and the time of one
//    allowed-token mask and of one token's advance along random walks (each step a uniformly
//    random allowed token, as a random-weight model at temperature 1 would pick);
//  - --json-schema FILE: W2 run again with the schema on every sequence, reported against
//    the unconstrained W2 of the same process.
// Not thread-safe (runs once per process).
#ifndef KVTIER_TOOLS_KVTIER_BENCH_GRAMMAR_H_
#define KVTIER_TOOLS_KVTIER_BENCH_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench_session.h"

namespace kvtier::cli::bench {

struct GrammarMaskOptions {
  std::vector<std::string> tokenizers;  // tokenizer.json files or their directories
  std::string schemas = "tests/grammar/schemas";    // *.json
  std::string grammars = "tests/grammar/grammars";  // *.gbnf
  int64_t steps = 64;                   // masks timed per schema or grammar
  std::string json;                     // results file ("" = none)
};

// Prints the table, writes the JSON; returns the exit status.
int RunGrammarMaskBench(const GrammarMaskOptions& options);

// W2 (`w2` as RunGpuWorkload built it) again with the JSON schema in schema_path on every
// sequence: rows "W2j" with its decode tok/s and its ratio to `unconstrained_decode`.
void RunW2WithSchema(kvt_model* model, WorkloadSpec w2, double unconstrained_decode, double decode_limit,
                     const std::string& schema_path, BenchSession* session);

// Structured output needs the model's tokenizer: copies tokenizer.json (and the
// tokenizer_config.json beside it) from `tokenizer` (a file or its directory) into
// model_dir when model_dir has none.
absl::Status EnsureModelTokenizer(const std::string& model_dir, const std::string& tokenizer);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_GRAMMAR_H_
