// `kvtier bench --grammar-mask`: the cost of grammar-constrained decoding on the CPU, per
// tokenizer, over a corpus of JSON schemas and GBNF grammars — compile time, and the time
// of one allowed-token mask and of one token's advance along random walks (each step a
// uniformly random allowed token, as a random-weight model at temperature 1 would pick).
// Prints a table and writes JSON. Not thread-safe (runs once per process).
#ifndef KVTIER_TOOLS_KVTIER_BENCH_GRAMMAR_MASK_H_
#define KVTIER_TOOLS_KVTIER_BENCH_GRAMMAR_MASK_H_

#include "args.h"

namespace kvtier::cli {

// Flags: --tokenizer PATH (repeatable: a tokenizer.json or a directory holding one),
// --schemas DIR (*.json), --grammars DIR (*.gbnf), --grammar-steps N, --json FILE.
int RunGrammarMaskBench(const Args& args);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_BENCH_GRAMMAR_MASK_H_
