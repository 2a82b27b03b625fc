// Test helpers for the grammar room: a vocabulary with multi-byte tokens (bytes, JSON-ish
// fragments, partial UTF-8), and an independent oracle — an Earley recognizer over the
// Grammar IR at the byte level — that says whether a byte string is a viable prefix or a
// complete sentence, without the Automaton, TokenIndex or Matcher.
#ifndef KVTIER_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_
#define KVTIER_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "grammar/grammar.h"
#include "grammar/vocabulary.h"
#include "testing/sanitizers.h"

namespace kvtier::grammar::testing {

// Sanitizer builds (Debug, instrumented) run the same checks on fewer cases.
using ::kvtier::testing::kSanitized;

// Ids 0..255 are the bytes, 256 is a non-text end token (eos), 257.. are `extra` random
// multi-byte tokens drawn from JSON-ish fragments (seeded), then a few ids without text.
inline constexpr int32_t kTestEos = 256;
std::shared_ptr<const Vocabulary> TestVocabulary(int extra, uint64_t seed);

// A byte-level BPE tokenizer.json (no merges) of vocab_size ids: 0..255 the bytes, 256
// <|begin_of_text|> and 257 <|end_of_text|> (special), then multi-byte JSON-ish fragments
// (seeded; partial UTF-8 among them), so generation exercises tokens that span grammar
// boundaries. With tokenizer_config.json (no clean-up of spaces).
std::string FragmentTokenizerJson(int32_t vocab_size, uint64_t seed);
// A tiny random-weight Llama checkpoint (one layer, vocab 512, bos 256, eos 257) with that tokenizer,
// written once per seed into the test temp directory; returns its path.
std::string FragmentModelDir(uint64_t seed = 3);

// Earley recognizer over the grammar's bytes (character classes as UTF-8 sequences).
class EarleyOracle {
 public:
  explicit EarleyOracle(const Grammar& grammar);

  // Resets to the empty text.
  void Reset();
  // Appends bytes to the text; false (and unchanged) when the result is not a viable prefix.
  bool Append(std::string_view bytes);
  // Whether text + bytes is a viable prefix (the text is left unchanged).
  bool Viable(std::string_view bytes);
  // Whether the text is a complete sentence.
  bool Complete() const;

 private:
  struct Symbol {
    bool terminal = false;
    uint8_t lo = 0, hi = 0;
    int32_t nonterminal = 0;
  };
  struct Production {
    int32_t lhs = 0;
    std::vector<Symbol> rhs;
  };
  struct Item {
    int32_t production, dot, origin;
    bool operator==(const Item&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Item& i) {
      return H::combine(std::move(h), i.production, i.dot, i.origin);
    }
  };
  struct ItemSet {
    std::vector<Item> items;
    absl::flat_hash_set<Item> seen;
    absl::flat_hash_set<int32_t> nullable_done;  // nonterminals completed with origin = this set
  };

  int32_t NewNonterminal();
  std::vector<Symbol> Lower(const Expr& e);
  void Add(size_t set, Item item);
  void Close(size_t set);
  bool Scan(uint8_t byte);

  std::vector<Production> productions_;
  std::vector<std::vector<int32_t>> by_lhs_;
  int32_t start_ = 0;
  std::vector<ItemSet> sets_;
};

}  // namespace kvtier::grammar::testing

#endif  // KVTIER_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_
