// CompiledGrammar: everything a Matcher needs for one (grammar, vocabulary) pair — the
// byte automaton and the token index — built once and shared by every sequence that uses
// the same grammar (GrammarCache). Immutable after Compile; thread-safe.
#ifndef KVTIER_GRAMMAR_COMPILED_GRAMMAR_H_
#define KVTIER_GRAMMAR_COMPILED_GRAMMAR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_index.h"
#include "grammar/vocabulary.h"

namespace kvtier::grammar {

struct CompileLimits {
  AutomatonLimits automaton;
  IndexLimits index;
};

class CompiledGrammar {
 public:
  // InvalidArgument as Automaton::Build and TokenIndex::Build say.
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const Grammar& grammar,
                                                                        std::shared_ptr<const Vocabulary> vocabulary,
                                                                        const CompileLimits& limits = {});

  const Automaton& automaton() const { return *automaton_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  const TokenIndex& index() const { return *index_; }
  double compile_seconds() const { return compile_seconds_; }

 private:
  CompiledGrammar() = default;

  std::shared_ptr<const Automaton> automaton_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::unique_ptr<const TokenIndex> index_;
  double compile_seconds_ = 0;
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_COMPILED_GRAMMAR_H_
