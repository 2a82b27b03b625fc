// ParseGbnf: llama.cpp's GBNF grammar syntax into a Grammar, so grammars written for
// llama.cpp (json.gbnf, arithmetic.gbnf, list.gbnf, ...) work unchanged.
//
//   rule  ::= name "::=" alternates            (one rule per line; "#" starts a comment)
//   item  := "literal" | [class] | [^class] | . | name | ( alternates )
//   postfix: * + ? {m} {m,} {m,n}
//
// Escapes in literals and classes: \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH.
// Newlines end a rule except inside parentheses and after "::=" or "|" (and, beyond
// llama.cpp, before a "|" that starts the next line). A grammar needs a rule named root;
// every referenced rule must be defined once. llama.cpp's token references (<...>) are
// refused. Stateless; thread-safe.
#ifndef KVTIER_GRAMMAR_GBNF_PARSER_H_
#define KVTIER_GRAMMAR_GBNF_PARSER_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace kvtier::grammar {

// Bounds that keep hostile input cheap (parse time and memory linear in the text).
struct GbnfLimits {
  size_t max_text_bytes = 1 << 20;
  int32_t max_nesting = 64;      // parentheses inside parentheses
  int32_t max_repetition = 2000;  // m and n of {m,n} (llama.cpp's threshold too)
  int32_t max_rules = 10000;
};

// InvalidArgument "GBNF line L, column C: <what is wrong>" (column in characters, both
// 1-based) for malformed text, an undefined or twice-defined rule, or a missing root.
absl::StatusOr<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits = {});

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_GBNF_PARSER_H_
