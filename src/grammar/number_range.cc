// Digit patterns for integer and decimal ranges (number_range.h).
//
// Readers parse JSON decimals into binary doubles, which rounds: "0.99999999999999999"
// becomes 1.0. Inclusive integer bounds survive rounding (it is monotonic and the bounds
// are exact doubles), but an exclusive bound does not, so next to one the fraction gets
// only as many digits as keep every value at least one double away from the bound.
#include "grammar/number_range.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace kvtier::grammar {
namespace {

Expr DigitClass(char lo, char hi) { return Expr::Class({{static_cast<char32_t>(lo), static_cast<char32_t>(hi)}}); }
Expr AnyDigits(int n) { return Expr::Repeat(DigitClass('0', '9'), n, n); }

bool All(std::string_view s, char c) { return s.find_first_not_of(c) == std::string_view::npos; }

// Strings of exactly s.size() digits (leading zeros allowed) >= s.
Expr AtLeast(std::string_view s) {
  if (s.empty()) return Expr::Empty();
  if (All(s, '0')) return AnyDigits(static_cast<int>(s.size()));
  const char d = s[0];
  std::vector<Expr> alts;
  alts.push_back(Expr::Seq({Lit(s.substr(0, 1)), AtLeast(s.substr(1))}));
  if (d < '9') alts.push_back(Expr::Seq({DigitClass(static_cast<char>(d + 1), '9'), AnyDigits(static_cast<int>(s.size()) - 1)}));
  return Expr::Choice(std::move(alts));
}

// Strings of exactly s.size() digits <= s.
Expr AtMost(std::string_view s) {
  if (s.empty()) return Expr::Empty();
  if (All(s, '9')) return AnyDigits(static_cast<int>(s.size()));
  const char d = s[0];
  std::vector<Expr> alts;
  if (d > '0') alts.push_back(Expr::Seq({DigitClass('0', static_cast<char>(d - 1)), AnyDigits(static_cast<int>(s.size()) - 1)}));
  alts.push_back(Expr::Seq({Lit(s.substr(0, 1)), AtMost(s.substr(1))}));
  return Expr::Choice(std::move(alts));
}

// Digit strings of one length between x and y (x <= y, same length).
Expr SameLength(std::string_view x, std::string_view y) {
  size_t p = 0;
  while (p < x.size() && x[p] == y[p]) ++p;
  if (p == x.size()) return Lit(x);
  const std::string_view r1 = x.substr(p + 1), r2 = y.substr(p + 1);
  const int r = static_cast<int>(r1.size());
  Expr body;
  if (All(r1, '0') && All(r2, '9')) {
    body = Expr::Seq({DigitClass(x[p], y[p]), AnyDigits(r)});
  } else {
    std::vector<Expr> alts;
    alts.push_back(Expr::Seq({Lit(x.substr(p, 1)), AtLeast(r1)}));
    if (x[p] + 1 <= y[p] - 1) alts.push_back(Expr::Seq({DigitClass(static_cast<char>(x[p] + 1), static_cast<char>(y[p] - 1)), AnyDigits(r)}));
    alts.push_back(Expr::Seq({Lit(y.substr(p, 1)), AtMost(r2)}));
    body = Expr::Choice(std::move(alts));
  }
  return Expr::Seq({Lit(x.substr(0, p)), std::move(body)});
}

uint64_t Pow10(int n) {
  uint64_t v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}

// Decimal integers (no leading zeros) in [a, b]; b nullopt = unbounded. a <= b.
Expr NonNegative(uint64_t a, std::optional<uint64_t> b) {
  const int la = static_cast<int>(std::to_string(a).size());
  const int lb = b.has_value() ? static_cast<int>(std::to_string(*b).size()) : la;
  std::vector<Expr> alts;
  for (int len = la; len <= lb; ++len) {
    const uint64_t lo = len == la ? a : Pow10(len - 1);
    const uint64_t hi = b.has_value() && len == lb ? *b : Pow10(len) - 1;
    alts.push_back(SameLength(std::to_string(lo), std::to_string(hi)));
  }
  if (!b.has_value()) alts.push_back(Expr::Seq({DigitClass('1', '9'), Expr::Repeat(DigitClass('0', '9'), la, std::nullopt)}));
  return Expr::Choice(std::move(alts));
}

uint64_t Magnitude(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

// The most fraction digits k such that 10^-k exceeds the gap between x and its nearest
// double on the side `up` (true: above x), so x +- 10^-k never rounds to x.
int SafeFractionDigits(uint64_t x, bool up) {
  const double d = static_cast<double>(x);
  const double gap = up ? std::nextafter(d, std::numeric_limits<double>::infinity()) - d
                        : d - std::nextafter(d, 0.0);
  int k = 0;
  while (k < 16 && std::pow(10.0, -(k + 1)) > gap) ++k;
  return k;
}

// A fraction: any (optional), zero (optional, all zeros) or nonzero (required); with
// max_digits, at most that many digits.
enum class Fraction { kAny, kZero, kNonzero };
std::optional<Expr> FractionExpr(Fraction kind, std::optional<int> max_digits) {
  const Expr digit = DigitClass('0', '9');
  switch (kind) {
    case Fraction::kAny:
      if (max_digits.has_value() && *max_digits == 0) return Expr::Empty();
      return Expr::Optional(Expr::Seq({Lit("."), Expr::Repeat(digit, 1, max_digits)}));
    case Fraction::kZero:
      return Expr::Optional(Expr::Seq({Lit("."), Expr::Plus(Lit("0"))}));
    case Fraction::kNonzero:
      if (max_digits.has_value() && *max_digits == 0) return std::nullopt;
      return Expr::Seq({Lit("."),
                        Expr::Repeat(digit, 0, max_digits.has_value() ? std::optional<int>(*max_digits - 1) : std::nullopt),
                        DigitClass('1', '9')});
  }
  return std::nullopt;
}

std::optional<int> MinDigits(std::optional<int> a, std::optional<int> b) {
  if (!a.has_value()) return b;
  if (!b.has_value()) return a;
  return std::min(*a, *b);
}

// Magnitudes y (an integer part and a fraction, no sign) with a <= y (a < y when
// a_exclusive) and y <= b (y < b when b_exclusive; b nullopt = unbounded).
std::optional<Expr> MagnitudeRange(uint64_t a, bool a_exclusive, std::optional<uint64_t> b, bool b_exclusive) {
  if (b.has_value() && (a > *b || (a == *b && (a_exclusive || b_exclusive)))) return std::nullopt;
  if (b.has_value() && a == *b) return Expr::Seq({Lit(std::to_string(a)), *FractionExpr(Fraction::kZero, std::nullopt)});
  const std::optional<int> low_digits = a_exclusive ? std::optional<int>(SafeFractionDigits(a, true)) : std::nullopt;
  const std::optional<int> high_digits =
      b.has_value() && b_exclusive ? std::optional<int>(SafeFractionDigits(*b, false)) : std::nullopt;
  std::vector<Expr> pieces;
  auto piece = [&](uint64_t lo, std::optional<uint64_t> hi, Fraction kind, std::optional<int> digits) {
    std::optional<Expr> fraction = FractionExpr(kind, digits);
    if (fraction.has_value()) pieces.push_back(Expr::Seq({NonNegative(lo, hi), std::move(*fraction)}));
  };
  // Integer part a: above an exclusive bound only with a nonzero fraction.
  const bool a_is_top_edge = b.has_value() && b_exclusive && a + 1 == *b;
  piece(a, a, a_exclusive ? Fraction::kNonzero : Fraction::kAny,
        MinDigits(low_digits, a_is_top_edge ? high_digits : std::nullopt));
  if (!b.has_value()) {
    piece(a + 1, std::nullopt, Fraction::kAny, std::nullopt);
  } else if (b_exclusive) {
    if (a + 2 <= *b) piece(a + 1, *b - 2, Fraction::kAny, std::nullopt);
    if (*b >= 1 && *b - 1 > a) piece(*b - 1, *b - 1, Fraction::kAny, high_digits);
  } else {
    if (a + 1 <= *b - 1) piece(a + 1, *b - 1, Fraction::kAny, std::nullopt);
    piece(*b, *b, Fraction::kZero, std::nullopt);
  }
  if (pieces.empty()) return std::nullopt;
  return Expr::Choice(std::move(pieces));
}

}  // namespace

std::optional<Expr> IntegerRangeExpr(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo.has_value() && hi.has_value() && *lo > *hi) return std::nullopt;
  if (!lo.has_value() && !hi.has_value()) {
    return Expr::Seq({Expr::Optional(Lit("-")),
                      Expr::Choice({Lit("0"), Expr::Seq({DigitClass('1', '9'), Expr::Star(DigitClass('0', '9'))})})});
  }
  if (lo.has_value() && *lo >= 0) return NonNegative(Magnitude(*lo), hi.has_value() ? std::optional<uint64_t>(Magnitude(*hi)) : std::nullopt);
  if (hi.has_value() && *hi < 0) {
    return Expr::Seq({Lit("-"), NonNegative(Magnitude(*hi), lo.has_value() ? std::optional<uint64_t>(Magnitude(*lo)) : std::nullopt)});
  }
  // lo < 0 (or none) <= hi (or none).
  Expr negative = Expr::Seq({Lit("-"), NonNegative(1, lo.has_value() ? std::optional<uint64_t>(Magnitude(*lo)) : std::nullopt)});
  Expr positive = NonNegative(0, hi.has_value() ? std::optional<uint64_t>(Magnitude(*hi)) : std::nullopt);
  return Expr::Choice({std::move(negative), std::move(positive)});
}

std::optional<Expr> NumberRangeExpr(IntegerBound lo, IntegerBound hi) {
  if (!lo.value.has_value() && !hi.value.has_value()) {
    const Expr digit = DigitClass('0', '9');
    return Expr::Seq({Expr::Optional(Lit("-")), Expr::Choice({Lit("0"), Expr::Seq({DigitClass('1', '9'), Expr::Star(digit)})}),
                      Expr::Optional(Expr::Seq({Lit("."), Expr::Plus(digit)})),
                      Expr::Optional(Expr::Seq({Expr::Class({{'e', 'e'}, {'E', 'E'}}), Expr::Optional(Expr::Class({{'-', '-'}, {'+', '+'}})),
                                                Expr::Plus(digit)}))});
  }
  std::vector<Expr> parts;
  // x >= 0 (a zero or positive magnitude).
  if (!hi.value.has_value() || *hi.value >= 0) {
    const uint64_t a = lo.value.has_value() && *lo.value > 0 ? Magnitude(*lo.value) : 0;
    const bool a_exclusive = lo.value.has_value() && *lo.value >= 0 && lo.exclusive;
    std::optional<Expr> e = MagnitudeRange(a, a_exclusive, hi.value.has_value() ? std::optional<uint64_t>(Magnitude(*hi.value)) : std::nullopt,
                                           hi.exclusive);
    if (e.has_value()) parts.push_back(std::move(*e));
  }
  // x < 0: magnitude strictly above 0, or above -hi when hi < 0.
  if (!lo.value.has_value() || *lo.value < 0) {
    const bool hi_negative = hi.value.has_value() && *hi.value < 0;
    const uint64_t a = hi_negative ? Magnitude(*hi.value) : 0;
    const bool a_exclusive = hi_negative ? hi.exclusive : true;
    std::optional<Expr> e = MagnitudeRange(a, a_exclusive, lo.value.has_value() ? std::optional<uint64_t>(Magnitude(*lo.value)) : std::nullopt,
                                           lo.exclusive);
    if (e.has_value()) parts.push_back(Expr::Seq({Lit("-"), std::move(*e)}));
  }
  if (parts.empty()) return std::nullopt;
  return Expr::Choice(std::move(parts));
}

}  // namespace kvtier::grammar
