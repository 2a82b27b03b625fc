// CompiledGrammar::Compile (compiled_grammar.h).
#include "grammar/compiled_grammar.h"

#include <chrono>

namespace kvtier::grammar {

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Compile(
    const Grammar& grammar, std::shared_ptr<const Vocabulary> vocabulary, const CompileLimits& limits) {
  const auto start = std::chrono::steady_clock::now();
  auto compiled = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  absl::StatusOr<std::shared_ptr<const Automaton>> automaton = Automaton::Build(grammar, limits.automaton);
  if (!automaton.ok()) return automaton.status();
  compiled->automaton_ = std::move(*automaton);
  absl::StatusOr<std::unique_ptr<const TokenIndex>> index =
      TokenIndex::Build(*compiled->automaton_, *vocabulary, limits.index);
  if (!index.ok()) return index.status();
  compiled->index_ = std::move(*index);
  compiled->vocabulary_ = std::move(vocabulary);
  compiled->compile_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::shared_ptr<const CompiledGrammar>(std::move(compiled));
}

}  // namespace kvtier::grammar
