// Grammar IR: construction helpers and the GBNF printer.
#include "grammar/grammar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grammar/utf8.h"

namespace kvtier::grammar {

std::vector<CodepointRange> NormalizeRanges(std::vector<CodepointRange> ranges) {
  std::vector<CodepointRange> clipped;
  for (CodepointRange r : ranges) {
    if (r.lo > r.hi || r.lo > kMaxCodepoint) continue;
    r.hi = std::min(r.hi, kMaxCodepoint);
    // Cut the surrogate block out.
    if (r.hi < kSurrogateFirst || r.lo > kSurrogateLast) {
      clipped.push_back(r);
      continue;
    }
    if (r.lo < kSurrogateFirst) clipped.push_back({r.lo, kSurrogateFirst - 1});
    if (r.hi > kSurrogateLast) clipped.push_back({kSurrogateLast + 1, r.hi});
  }
  std::sort(clipped.begin(), clipped.end(),
            [](const CodepointRange& a, const CodepointRange& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> out;
  for (const CodepointRange& r : clipped) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodepointRange> ComplementRanges(const std::vector<CodepointRange>& ranges) {
  std::vector<CodepointRange> out;
  char32_t next = 0;
  for (const CodepointRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return NormalizeRanges(std::move(out));
}

Expr Expr::Literal(std::string_view text) {
  if (text.empty()) return Empty();
  Expr e;
  e.kind = Kind::kLiteral;
  e.literal = std::string(text);
  return e;
}

Expr Expr::Class(std::vector<CodepointRange> ranges) {
  Expr e;
  e.kind = Kind::kCharClass;
  e.ranges = NormalizeRanges(std::move(ranges));
  return e;
}

Expr Expr::Ref(int32_t rule) {
  Expr e;
  e.kind = Kind::kRuleRef;
  e.rule = rule;
  return e;
}

Expr Expr::Seq(std::vector<Expr> items) {
  std::vector<Expr> flat;
  for (Expr& item : items) {
    if (item.kind == Kind::kEmpty) continue;
    if (item.kind == Kind::kSequence) {
      for (Expr& inner : item.items) flat.push_back(std::move(inner));
    } else {
      flat.push_back(std::move(item));
    }
  }
  if (flat.empty()) return Empty();
  if (flat.size() == 1) return std::move(flat[0]);
  Expr e;
  e.kind = Kind::kSequence;
  e.items = std::move(flat);
  return e;
}

Expr Expr::Choice(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::kChoice;
  e.items = std::move(items);
  return e;
}

Expr Expr::Repeat(Expr item, int32_t min, std::optional<int32_t> max) {
  if (max.has_value() && *max == 1 && min == 1) return item;
  if (max.has_value() && *max == 0) return Empty();
  Expr e;
  e.kind = Kind::kRepeat;
  e.items.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

int32_t Grammar::RuleIndex(std::string_view name) {
  auto it = by_name_.find(std::string(name));
  if (it != by_name_.end()) return it->second;
  const int32_t index = static_cast<int32_t>(rules_.size());
  rules_.push_back({std::string(name), Expr::Empty()});
  by_name_.emplace(std::string(name), index);
  return index;
}

std::optional<int32_t> Grammar::FindRule(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

int32_t Grammar::NewRule(std::string_view base) {
  std::string clean;
  for (char c : base) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    clean.push_back(word ? c : '-');
    if (clean.size() >= 48) break;
  }
  if (clean.empty()) clean = "rule";
  std::string name = clean;
  for (int n = 1; by_name_.contains(name); ++n) name = absl::StrCat(clean, "-", n);
  return RuleIndex(name);
}

namespace {

// One code point as GBNF writes it inside a literal or class: printable ASCII as itself
// (escaping what the context needs), everything else as \x, \u or \U.
void AppendCodepoint(char32_t c, bool in_class, std::string* out) {
  switch (c) {
    case '\n': *out += "\\n"; return;
    case '\r': *out += "\\r"; return;
    case '\t': *out += "\\t"; return;
    case '\\': *out += "\\\\"; return;
    default: break;
  }
  if (!in_class && c == '"') {
    *out += "\\\"";
    return;
  }
  if (in_class && (c == ']' || c == '[')) {
    *out += c == ']' ? "\\]" : "\\[";
    return;
  }
  // '-' and '^' inside a class, like every non-printable, are written as \x escapes.
  if (c >= 0x20 && c < 0x7F && !(in_class && (c == '-' || c == '^'))) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x100) {
    absl::StrAppendFormat(out, "\\x%02X", static_cast<uint32_t>(c));
  } else if (c < 0x10000) {
    absl::StrAppendFormat(out, "\\u%04X", static_cast<uint32_t>(c));
  } else {
    absl::StrAppendFormat(out, "\\U%08X", static_cast<uint32_t>(c));
  }
}

void AppendExpr(const Grammar& g, const Expr& e, int context, std::string* out);

// Precedence contexts: 0 = top of a rule body / inside parentheses, 1 = an item of a
// sequence, 2 = the operand of a repetition.
void AppendAtom(const Grammar& g, const Expr& e, int context, std::string* out) {
  const bool needs_parens = (e.kind == Expr::Kind::kChoice && context >= 1) ||
                            (e.kind == Expr::Kind::kSequence && context >= 2) ||
                            (e.kind == Expr::Kind::kRepeat && context >= 2);
  if (needs_parens) *out += "(";
  AppendExpr(g, e, needs_parens ? 0 : context, out);
  if (needs_parens) *out += ")";
}

void AppendExpr(const Grammar& g, const Expr& e, int context, std::string* out) {
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      *out += "\"\"";
      return;
    case Expr::Kind::kLiteral: {
      *out += "\"";
      size_t pos = 0;
      while (pos < e.literal.size()) AppendCodepoint(DecodeUtf8At(e.literal, &pos), false, out);
      *out += "\"";
      return;
    }
    case Expr::Kind::kCharClass:
      if (e.ranges.empty()) {
        *out += "[^\\x00-\\U0010FFFF]";
        return;
      }
      *out += "[";
      for (const CodepointRange& r : e.ranges) {
        AppendCodepoint(r.lo, true, out);
        if (r.hi != r.lo) {
          *out += "-";
          AppendCodepoint(r.hi, true, out);
        }
      }
      *out += "]";
      return;
    case Expr::Kind::kRuleRef:
      *out += g.rules()[static_cast<size_t>(e.rule)].name;
      return;
    case Expr::Kind::kSequence:
      for (size_t i = 0; i < e.items.size(); ++i) {
        if (i > 0) *out += " ";
        AppendAtom(g, e.items[i], 1, out);
      }
      return;
    case Expr::Kind::kChoice:
      for (size_t i = 0; i < e.items.size(); ++i) {
        if (i > 0) *out += " | ";
        AppendAtom(g, e.items[i], 1, out);
      }
      return;
    case Expr::Kind::kRepeat: {
      AppendAtom(g, e.items[0], 2, out);
      if (e.min == 0 && e.max == 1) {
        *out += "?";
      } else if (e.min == 0 && !e.max.has_value()) {
        *out += "*";
      } else if (e.min == 1 && !e.max.has_value()) {
        *out += "+";
      } else if (!e.max.has_value()) {
        absl::StrAppend(out, "{", e.min, ",}");
      } else if (*e.max == e.min) {
        absl::StrAppend(out, "{", e.min, "}");
      } else {
        absl::StrAppend(out, "{", e.min, ",", *e.max, "}");
      }
      return;
    }
  }
}

}  // namespace

std::string Grammar::ToGbnf() const {
  // Rules in the order they are first mentioned, starting from the root: parsing the
  // text numbers them in that order, so printing the parse gives the same text. Rules the
  // root does not reach are left out (they cannot match anything).
  std::string out;
  if (rules_.empty()) return out;
  std::vector<bool> seen(rules_.size(), false);
  std::vector<int32_t> order = {root_};
  seen[static_cast<size_t>(root_)] = true;
  for (size_t i = 0; i < order.size(); ++i) {
    const Rule& rule = rules_[static_cast<size_t>(order[i])];
    absl::StrAppend(&out, rule.name, " ::= ");
    AppendExpr(*this, rule.body, 0, &out);
    out += "\n";
    // References in printing order (depth first, left to right).
    std::vector<const Expr*> stack = {&rule.body};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      if (e->kind == Expr::Kind::kRuleRef && !seen[static_cast<size_t>(e->rule)]) {
        seen[static_cast<size_t>(e->rule)] = true;
        order.push_back(e->rule);
      }
      for (auto it = e->items.rbegin(); it != e->items.rend(); ++it) stack.push_back(&*it);
    }
  }
  return out;
}

}  // namespace kvtier::grammar
