// Grammar expressions for JSON numbers inside a range, exactly: integer ranges as digit
// patterns (no leading zeros), decimal ranges with integer bounds by their integer part
// and fraction (a fraction must be zero at an inclusive upper bound, nonzero just above an
// exclusive lower one). Bounded numbers have no exponent. Stateless; thread-safe.
#ifndef KVTIER_GRAMMAR_NUMBER_RANGE_H_
#define KVTIER_GRAMMAR_NUMBER_RANGE_H_

#include <cstdint>
#include <optional>

#include "grammar/grammar.h"

namespace kvtier::grammar {

// One end of a range over the integers' grid; nullopt value = unbounded.
struct IntegerBound {
  std::optional<int64_t> value;
  bool exclusive = false;
};

// JSON integers n with lo <= n <= hi ("-0" never). Both unbounded: any JSON integer.
// nullopt when no integer lies in the range.
std::optional<Expr> IntegerRangeExpr(std::optional<int64_t> lo, std::optional<int64_t> hi);

// JSON numbers x (integers or decimals, no exponent) with lo <(=) x <(=) hi, where the
// bounds are integers (callers round fractional bounds inward). Both unbounded: any JSON
// number, exponent included. nullopt when the range is empty.
std::optional<Expr> NumberRangeExpr(IntegerBound lo, IntegerBound hi);

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_NUMBER_RANGE_H_
