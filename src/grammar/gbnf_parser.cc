// Recursive-descent GBNF parser (gbnf_parser.h).
#include "grammar/gbnf_parser.h"

#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grammar/utf8.h"

namespace kvtier::grammar {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view text, const GbnfLimits& limits) : text_(text), limits_(limits) {}

  absl::StatusOr<Grammar> Parse() {
    if (text_.size() > limits_.max_text_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("GBNF text is ", text_.size(), " bytes; the limit is ",
                                                     limits_.max_text_bytes));
    }
    if (!IsValidUtf8(text_)) return Error(FirstInvalidUtf8(), "the grammar text is not valid UTF-8");
    SkipSpace(true);
    while (ok() && !AtEnd()) {
      ParseRule();
      if (!ok()) break;
      SkipSpace(true);
    }
    if (!ok()) return status_;
    for (size_t i = 0; i < grammar_.rules().size(); ++i) {
      if (!defined_.contains(static_cast<int32_t>(i))) {
        return Error(first_use_[static_cast<int32_t>(i)],
                     absl::StrCat("rule '", grammar_.rules()[i].name, "' is used but never defined"));
      }
    }
    std::optional<int32_t> root = grammar_.FindRule("root");
    if (!root.has_value()) return Error(text_.size(), "the grammar has no rule named 'root'");
    grammar_.set_root(*root);
    return std::move(grammar_);
  }

 private:
  bool ok() const { return status_.ok(); }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  size_t FirstInvalidUtf8() const {
    size_t pos = 0;
    while (pos < text_.size()) {
      const size_t before = pos;
      const char32_t c = DecodeUtf8At(text_, &pos);
      if (pos == before + 1 && c >= 0x80) return before;
    }
    return text_.size();
  }

  absl::Status Error(size_t at, std::string_view message) const {
    int line = 1, column = 1;
    size_t pos = 0;
    while (pos < at && pos < text_.size()) {
      if (text_[pos] == '\n') {
        ++line;
        column = 1;
        ++pos;
      } else {
        DecodeUtf8At(text_, &pos);
        ++column;
      }
    }
    return absl::InvalidArgumentError(absl::StrFormat("GBNF line %d, column %d: %s", line, column, std::string(message)));
  }

  void Fail(size_t at, std::string_view message) {
    if (ok()) status_ = Error(at, message);
  }

  // Spaces, tabs and comments; newlines too when newline_ok.
  void SkipSpace(bool newline_ok) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else if ((c == '\n' || c == '\r') && newline_ok) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  void ParseRule() {
    const size_t start = pos_;
    std::string_view name = ParseName();
    if (name.empty()) {
      Fail(start, absl::StrCat("expected a rule name, found '", std::string(1, Peek()), "'"));
      return;
    }
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") {
      Fail(pos_, absl::StrCat("expected '::=' after the rule name '", std::string(name), "'"));
      return;
    }
    pos_ += 3;
    SkipSpace(true);
    const int32_t rule = Reference(name, start);
    if (!ok()) return;
    if (!defined_.insert(rule).second) {
      Fail(start, absl::StrCat("rule '", std::string(name), "' is defined twice"));
      return;
    }
    Expr body = ParseAlternates(/*nested=*/false, 0);
    if (!ok()) return;
    grammar_.SetBody(rule, std::move(body));
    if (!AtEnd() && Peek() != '\n' && Peek() != '\r') {
      Fail(pos_, absl::StrCat("unexpected '", std::string(1, Peek()), "' in rule '", std::string(name), "'"));
    }
  }

  int32_t Reference(std::string_view name, size_t at) {
    if (!grammar_.FindRule(name).has_value() &&
        static_cast<int32_t>(grammar_.rules().size()) >= limits_.max_rules) {
      Fail(at, absl::StrCat("more than ", limits_.max_rules, " rules"));
      return 0;
    }
    const int32_t rule = grammar_.RuleIndex(name);
    first_use_.try_emplace(rule, at);
    return rule;
  }

  Expr ParseAlternates(bool nested, int depth) {
    std::vector<Expr> alternatives;
    alternatives.push_back(ParseSequence(nested, depth));
    while (ok()) {
      if (Peek() == '|') {
        ++pos_;
        SkipSpace(true);
        alternatives.push_back(ParseSequence(nested, depth));
        continue;
      }
      if (!nested && (Peek() == '\n' || Peek() == '\r')) {
        // A "|" at the start of the next line continues the rule.
        const size_t saved = pos_;
        SkipSpace(true);
        if (Peek() == '|') continue;
        pos_ = saved;
      }
      break;
    }
    return Expr::Choice(std::move(alternatives));
  }

  Expr ParseSequence(bool nested, int depth) {
    std::vector<Expr> items;
    while (ok() && !AtEnd()) {
      const size_t start = pos_;
      const char c = Peek();
      Expr item;
      if (c == '"') {
        item = ParseLiteral();
      } else if (c == '[') {
        item = ParseClass();
      } else if (c == '.') {
        ++pos_;
        item = Expr::Class({{0, kMaxCodepoint}});
      } else if (c == '(') {
        if (depth + 1 > limits_.max_nesting) {
          Fail(pos_, absl::StrCat("parentheses nested deeper than ", limits_.max_nesting));
          break;
        }
        ++pos_;
        SkipSpace(true);
        item = ParseAlternates(/*nested=*/true, depth + 1);
        if (!ok()) break;
        if (Peek() != ')') {
          Fail(pos_, AtEnd() ? "missing ')'" : absl::StrCat("expected ')', found '", std::string(1, Peek()), "'"));
          break;
        }
        ++pos_;
      } else if (c == '<' || (c == '!' && Peek(1) == '<')) {
        Fail(pos_, "token references (<...>) are not supported");
        break;
      } else if (IsNameChar(c)) {
        std::string_view name = ParseName();
        // The next rule's "name ::=" ends this (unparenthesized) sequence at a newline;
        // here a name followed by "::=" means a newline was missing.
        const size_t after = pos_;
        SkipSpace(false);
        if (text_.substr(pos_, 3) == "::=") {
          Fail(start, absl::StrCat("expected a newline before the rule '", std::string(name), "'"));
          break;
        }
        pos_ = after;
        item = Expr::Ref(Reference(name, start));
      } else {
        break;
      }
      if (!ok()) break;
      SkipSpace(nested);
      while (ok() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
        item = ParsePostfix(std::move(item));
        SkipSpace(nested);
      }
      items.push_back(std::move(item));
    }
    return Expr::Seq(std::move(items));
  }

  Expr ParsePostfix(Expr item) {
    const char op = Peek();
    ++pos_;
    if (op == '*') return Expr::Star(std::move(item));
    if (op == '+') return Expr::Plus(std::move(item));
    if (op == '?') return Expr::Optional(std::move(item));
    const size_t open = pos_ - 1;
    SkipSpace(false);
    std::optional<int32_t> min = ParseCount();
    if (!ok()) return item;
    if (!min.has_value()) {
      Fail(pos_, "expected a number after '{'");
      return item;
    }
    SkipSpace(false);
    std::optional<int32_t> max = min;
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      max = ParseCount();
      if (!ok()) return item;
      SkipSpace(false);
    }
    if (Peek() != '}') {
      Fail(pos_, "expected '}' to close the repetition");
      return item;
    }
    ++pos_;
    if (max.has_value() && *max < *min) {
      Fail(open, absl::StrCat("repetition {", *min, ",", *max, "}: the maximum is below the minimum"));
      return item;
    }
    return Expr::Repeat(std::move(item), *min, max);
  }

  std::optional<int32_t> ParseCount() {
    const size_t start = pos_;
    int64_t value = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      value = value * 10 + (Peek() - '0');
      ++pos_;
      if (value > limits_.max_repetition) {
        Fail(start, absl::StrCat("repetition count above the limit of ", limits_.max_repetition));
        return std::nullopt;
      }
    }
    if (pos_ == start) return std::nullopt;
    return static_cast<int32_t>(value);
  }

  // One character of a literal or class at pos_ (escape or UTF-8). nullopt after Fail.
  std::optional<char32_t> ParseChar() {
    const size_t start = pos_;
    if (Peek() != '\\') return DecodeUtf8At(text_, &pos_);
    ++pos_;
    const char e = Peek();
    ++pos_;
    switch (e) {
      case 'n': return U'\n';
      case 'r': return U'\r';
      case 't': return U'\t';
      case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<char32_t>(e);
      case 'x': case 'u': case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t value = 0;
        for (int i = 0; i < digits; ++i) {
          const int h = HexValue(Peek());
          if (h < 0) {
            Fail(start, absl::StrCat("\\", std::string(1, e), " needs ", digits, " hex digits"));
            return std::nullopt;
          }
          value = value * 16 + static_cast<uint32_t>(h);
          ++pos_;
        }
        if (value > kMaxCodepoint || (value >= kSurrogateFirst && value <= kSurrogateLast)) {
          Fail(start, absl::StrFormat("escape U+%04X is not a Unicode scalar value", value));
          return std::nullopt;
        }
        return static_cast<char32_t>(value);
      }
      default:
        Fail(start, AtEnd() && e == '\0' ? "unterminated escape"
                                         : absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
        return std::nullopt;
    }
  }

  Expr ParseLiteral() {
    const size_t start = pos_;
    ++pos_;  // "
    std::string text;
    while (true) {
      if (AtEnd()) {
        Fail(start, "unterminated string literal");
        return Expr::Empty();
      }
      if (Peek() == '"') {
        ++pos_;
        break;
      }
      std::optional<char32_t> c = ParseChar();
      if (!c.has_value()) return Expr::Empty();
      AppendUtf8(*c, &text);
    }
    return Expr::Literal(text);
  }

  Expr ParseClass() {
    const size_t start = pos_;
    ++pos_;  // [
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodepointRange> ranges;
    while (true) {
      if (AtEnd()) {
        Fail(start, "unterminated character class");
        return Expr::Empty();
      }
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      const size_t item = pos_;
      std::optional<char32_t> lo = ParseChar();
      if (!lo.has_value()) return Expr::Empty();
      char32_t hi = *lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        std::optional<char32_t> end = ParseChar();
        if (!end.has_value()) return Expr::Empty();
        if (*end < *lo) {
          Fail(item, "character range is reversed (its end is below its start)");
          return Expr::Empty();
        }
        hi = *end;
      }
      ranges.push_back({*lo, hi});
    }
    std::vector<CodepointRange> normalized = NormalizeRanges(std::move(ranges));
    return Expr::Class(negated ? ComplementRanges(normalized) : std::move(normalized));
  }

  std::string_view text_;
  const GbnfLimits& limits_;
  size_t pos_ = 0;
  absl::Status status_;
  Grammar grammar_;
  absl::flat_hash_set<int32_t> defined_;
  absl::flat_hash_map<int32_t, size_t> first_use_;
};

}  // namespace

absl::StatusOr<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits) {
  return Parser(text, limits).Parse();
}

}  // namespace kvtier::grammar
