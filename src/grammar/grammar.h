// Grammar: the intermediate form every constraint becomes (a GBNF text, a JSON schema) —
// named rules whose bodies are expressions over Unicode code points: literals, character
// classes, rule references, sequences, choices and bounded or unbounded repetition.
// Plain value type; the Automaton (automaton.h) turns it into a byte-level machine.
// ToGbnf prints it back in llama.cpp's GBNF syntax: the canonical text that identifies a
// grammar in the compile cache. Not thread-safe while being built; const use is.
#ifndef KVTIER_GRAMMAR_GRAMMAR_H_
#define KVTIER_GRAMMAR_GRAMMAR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvtier::grammar {

// The largest code point, and the surrogate block UTF-8 cannot encode (character classes
// never contain it: every class is a set of encodable scalar values).
inline constexpr char32_t kMaxCodepoint = 0x10FFFF;
inline constexpr char32_t kSurrogateFirst = 0xD800;
inline constexpr char32_t kSurrogateLast = 0xDFFF;

struct CodepointRange {
  char32_t lo = 0;  // inclusive
  char32_t hi = 0;  // inclusive
  bool operator==(const CodepointRange&) const = default;
};

// Sorts, merges and removes surrogates: the canonical form of a class.
std::vector<CodepointRange> NormalizeRanges(std::vector<CodepointRange> ranges);
// The scalar values not in (normalized) ranges.
std::vector<CodepointRange> ComplementRanges(const std::vector<CodepointRange>& ranges);

struct Expr {
  enum class Kind : uint8_t { kEmpty, kLiteral, kCharClass, kRuleRef, kSequence, kChoice, kRepeat };

  Kind kind = Kind::kEmpty;
  std::string literal;                 // kLiteral: UTF-8 text (matched as its bytes)
  std::vector<CodepointRange> ranges;  // kCharClass: normalized; empty matches nothing
  int32_t rule = 0;                    // kRuleRef: index into Grammar::rules
  std::vector<Expr> items;             // kSequence, kChoice: the parts; kRepeat: one item
  int32_t min = 0;                     // kRepeat
  std::optional<int32_t> max;          // kRepeat: nullopt = unbounded

  static Expr Empty() { return Expr(); }
  static Expr Literal(std::string_view text);
  static Expr Class(std::vector<CodepointRange> ranges);  // normalizes
  static Expr Char(char32_t c) { return Class({{c, c}}); }
  static Expr Ref(int32_t rule);
  // Sequence/Choice of one item are that item; nested sequences are flattened.
  static Expr Seq(std::vector<Expr> items);
  static Expr Choice(std::vector<Expr> items);
  static Expr Repeat(Expr item, int32_t min, std::optional<int32_t> max);
  static Expr Optional(Expr item) { return Repeat(std::move(item), 0, 1); }
  static Expr Star(Expr item) { return Repeat(std::move(item), 0, std::nullopt); }
  static Expr Plus(Expr item) { return Repeat(std::move(item), 1, std::nullopt); }
};

// Shorthand for Expr::Literal, for the compilers that spell out many literals.
inline Expr Lit(std::string_view text) { return Expr::Literal(text); }

struct Rule {
  std::string name;  // [A-Za-z0-9_-]+, unique in its grammar
  Expr body;
};

class Grammar {
 public:
  // Returns the rule's index, creating it (with an empty body) when new.
  int32_t RuleIndex(std::string_view name);
  std::optional<int32_t> FindRule(std::string_view name) const;
  // A new rule named `base` or base-N, whichever is free.
  int32_t NewRule(std::string_view base);
  void SetBody(int32_t rule, Expr body) { rules_[static_cast<size_t>(rule)].body = std::move(body); }

  const std::vector<Rule>& rules() const { return rules_; }
  int32_t root() const { return root_; }
  void set_root(int32_t rule) { root_ = rule; }

  // GBNF text, root rule first then the others in index order; parsing it gives back an
  // equivalent grammar.
  std::string ToGbnf() const;

 private:
  std::vector<Rule> rules_;
  absl::flat_hash_map<std::string, int32_t> by_name_;
  int32_t root_ = 0;
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_GRAMMAR_H_
