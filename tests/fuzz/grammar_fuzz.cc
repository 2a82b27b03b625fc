// Fuzzes structured-output constraints: the input is read both as GBNF text and as a JSON
// schema; whatever compiles is printed back (the print must parse again), built into the
// byte automaton, indexed against a small vocabulary with multi-byte and partial-UTF-8
// tokens, and walked by a matcher for a few steps (tokens chosen by the input's bytes).
// Limits are tighter than the library's defaults so each input stays fast (well under a
// second in the sanitizer build); the code paths are the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/compiled_grammar.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace {

using namespace kvtier::grammar;

std::shared_ptr<const Vocabulary> FuzzVocabulary() {
  std::vector<std::optional<std::string>> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back(std::nullopt);  // 256: end token
  for (const char* t : {"{\"", "\":", "\",", "\"}", "true", "null", "12", "-1", "a\"", " \"", "\n  ", "\\u00", "\xC3",
                        "\xA9\"", "\xE2\x82\xAC", "ab", "::=", "[0", "0]", "\" ", "},{", "e+", ".5"}) {
    bytes.push_back(std::string(t));
  }
  return Vocabulary::Create(std::move(bytes));
}

void Exercise(const Grammar& g, std::string_view input) {
  // The canonical print parses back to the same print.
  const std::string printed = g.ToGbnf();
  absl::StatusOr<Grammar> again = ParseGbnf(printed);
  if (!again.ok() || again->ToGbnf() != printed) std::abort();
  static const std::shared_ptr<const Vocabulary> vocab = FuzzVocabulary();
  CompileLimits limits;
  limits.automaton.max_nodes = 5000;
  limits.automaton.max_closure_work = 500'000;
  limits.index.max_walk_steps = 300'000;
  limits.index.max_stacks = 256;
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> compiled = CompiledGrammar::Compile(g, vocab, limits);
  if (!compiled.ok()) return;
  Matcher m(*compiled, {256}, /*max_stacks=*/256);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->num_words()));
  for (size_t step = 0; step < 24 && !m.terminated() && m.status().ok(); ++step) {
    m.FillMask(mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    const uint8_t pick = step < input.size() ? static_cast<uint8_t>(input[step]) : 0;
    // A token the mask allows must be accepted.
    if (!m.AcceptToken(allowed[pick % allowed.size()])) std::abort();
  }
  // And a token it forbade must not be: try one (the mask is of the state before).
  m.FillMask(mask);
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (!((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u)) {
      if (m.AcceptToken(id)) std::abort();
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), std::min<size_t>(size, 64 << 10));
  GbnfLimits gbnf_limits;
  gbnf_limits.max_repetition = 100;
  if (absl::StatusOr<Grammar> g = ParseGbnf(input, gbnf_limits); g.ok()) Exercise(*g, input);
  JsonSchemaLimits schema_limits;
  schema_limits.max_repetition = 100;
  if (absl::StatusOr<Grammar> g = JsonSchemaToGrammar(input, schema_limits); g.ok()) Exercise(*g, input);
  return 0;
}
