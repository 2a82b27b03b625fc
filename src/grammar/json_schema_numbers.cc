// SchemaCompiler::Number: integer and number schemas with ranges (json_schema.h).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/number_range.h"

namespace kvtier::grammar {
namespace {

// Bounds beyond this are narrowed to it (the output stays inside the schema's range).
constexpr double kMaxBound = 1e15;

struct Bound {
  std::optional<double> value;
  bool exclusive = false;
};

}  // namespace

absl::StatusOr<Expr> SchemaCompiler::Number(const SchemaJson& schema, const std::string& pointer, bool integer) {
  // The tighter of minimum / exclusiveMinimum (and the draft-4 boolean form), likewise max.
  auto read = [&](const char* inclusive_key, const char* exclusive_key, bool lower) -> absl::StatusOr<Bound> {
    Bound b;
    auto tighter = [&](double v, bool exclusive) {
      if (!b.value.has_value() || (lower ? v > *b.value : v < *b.value) || (v == *b.value && exclusive)) {
        b.value = v;
        b.exclusive = exclusive;
      }
    };
    bool draft4_exclusive = false;
    if (schema.contains(exclusive_key)) {
      const SchemaJson& e = schema[exclusive_key];
      if (e.is_boolean()) {
        draft4_exclusive = e.get<bool>();
      } else if (e.is_number()) {
        tighter(e.get<double>(), true);
      } else {
        return Error(pointer, absl::StrCat("'", exclusive_key, "' must be a number"));
      }
    }
    if (schema.contains(inclusive_key)) {
      const SchemaJson& v = schema[inclusive_key];
      if (!v.is_number()) return Error(pointer, absl::StrCat("'", inclusive_key, "' must be a number"));
      tighter(v.get<double>(), draft4_exclusive);
    }
    if (b.value.has_value() && !std::isfinite(*b.value)) {
      return Error(pointer, absl::StrCat("'", inclusive_key, "' is not finite"));
    }
    return b;
  };
  absl::StatusOr<Bound> lo = read("minimum", "exclusiveMinimum", true);
  if (!lo.ok()) return lo.status();
  absl::StatusOr<Bound> hi = read("maximum", "exclusiveMaximum", false);
  if (!hi.ok()) return hi.status();

  // Integer-grid bounds, rounded inward and narrowed to +-kMaxBound.
  IntegerBound ilo, ihi;
  if (lo->value.has_value()) {
    const double v = *lo->value;
    if (v < -kMaxBound) {
      ilo = {static_cast<int64_t>(-kMaxBound), false};
    } else if (v > kMaxBound) {
      return Error(pointer, absl::StrCat("'minimum' ", v, " is beyond the supported range of +-1e15"));
    } else {
      const double c = std::ceil(v);
      ilo = {static_cast<int64_t>(c), c == v && lo->exclusive};
    }
  }
  if (hi->value.has_value()) {
    const double v = *hi->value;
    if (v > kMaxBound) {
      ihi = {static_cast<int64_t>(kMaxBound), false};
    } else if (v < -kMaxBound) {
      return Error(pointer, absl::StrCat("'maximum' ", v, " is beyond the supported range of +-1e15"));
    } else {
      const double f = std::floor(v);
      ihi = {static_cast<int64_t>(f), f == v && hi->exclusive};
    }
  }
  std::optional<Expr> e;
  if (integer) {
    std::optional<int64_t> a = ilo.value, b = ihi.value;
    if (a.has_value() && ilo.exclusive) ++*a;
    if (b.has_value() && ihi.exclusive) --*b;
    if (!a.has_value() && !b.has_value()) return AnyInteger();
    e = IntegerRangeExpr(a, b);
  } else {
    if (!ilo.value.has_value() && !ihi.value.has_value()) return AnyNumber();
    e = NumberRangeExpr(ilo, ihi);
  }
  if (!e.has_value()) {
    return Error(pointer, absl::StrCat("no ", integer ? "integer" : "number",
                                       " satisfies 'minimum'/'maximum' (fractional bounds are rounded inward)"));
  }
  return std::move(*e);
}

Expr SchemaCompiler::AnyNumberBody() { return *NumberRangeExpr({}, {}); }
Expr SchemaCompiler::AnyIntegerBody() { return *IntegerRangeExpr(std::nullopt, std::nullopt); }

}  // namespace kvtier::grammar
