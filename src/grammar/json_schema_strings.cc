// SchemaCompiler::String: strings with lengths or a format, and the keys of additional
// properties (json_schema.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/number_range.h"
#include "grammar/utf8.h"

namespace kvtier::grammar {
namespace {

Expr Digit() { return Expr::Class({{'0', '9'}}); }
Expr Digits(int n) { return Expr::Repeat(Digit(), n, n); }
Expr Hex(int n) { return Expr::Repeat(Expr::Class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}), n, n); }

// YYYY-MM-DD of a real calendar day (years 1000-2999; February stops at 28, which every
// year has).
Expr Date() {
  const Expr day28 = Expr::Choice({Expr::Seq({Lit("0"), Expr::Class({{'1', '9'}})}),
                                   Expr::Seq({Lit("1"), Digit()}), Expr::Seq({Lit("2"), Expr::Class({{'0', '8'}})})});
  const Expr day30 = Expr::Choice({day28, Lit("29"), Lit("30")});
  const Expr day31 = Expr::Choice({day30, Lit("31")});
  const Expr months31 = Expr::Choice({Lit("01"), Lit("03"), Lit("05"), Lit("07"), Lit("08"), Lit("10"), Lit("12")});
  const Expr months30 = Expr::Choice({Lit("04"), Lit("06"), Lit("09"), Lit("11")});
  return Expr::Seq({Expr::Class({{'1', '2'}}), Digits(3), Lit("-"),
                    Expr::Choice({Expr::Seq({months31, Lit("-"), day31}), Expr::Seq({months30, Lit("-"), day30}),
                                  Expr::Seq({Lit("02-"), day28})})});
}

// HH:MM:SS[.fraction](Z|+HH:MM|-HH:MM) (RFC 3339 full-time, no leap second).
Expr Time() {
  const Expr hour = Expr::Choice({Expr::Seq({Expr::Class({{'0', '1'}}), Digit()}), Expr::Seq({Lit("2"), Expr::Class({{'0', '3'}})})});
  const Expr minute = Expr::Seq({Expr::Class({{'0', '5'}}), Digit()});
  const Expr offset = Expr::Choice({Lit("Z"), Expr::Seq({Expr::Class({{'+', '+'}, {'-', '-'}}), hour, Lit(":"), minute})});
  return Expr::Seq({hour, Lit(":"), minute, Lit(":"), minute,
                    Expr::Optional(Expr::Seq({Lit("."), Expr::Repeat(Digit(), 1, 9)})), offset});
}

// Local part of word characters and dots between them, "@", a dotted domain.
Expr Email() {
  const Expr word = Expr::Repeat(Expr::Class({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}, {'+', '+'}, {'-', '-'}}), 1, 32);
  const Expr label = Expr::Repeat(Expr::Class({{'a', 'z'}, {'0', '9'}}), 1, 32);
  return Expr::Seq({word, Expr::Repeat(Expr::Seq({Lit("."), word}), 0, 3), Lit("@"), label,
                    Expr::Repeat(Expr::Seq({Lit("."), label}), 0, 3), Lit("."),
                    Expr::Repeat(Expr::Class({{'a', 'z'}}), 2, 6)});
}

Expr Ipv4() {
  const Expr octet = *IntegerRangeExpr(0, 255);
  return Expr::Seq({octet, Lit("."), octet, Lit("."), octet, Lit("."), octet});
}

Expr Uuid() {
  return Expr::Seq({Hex(8), Lit("-"), Hex(4), Lit("-"), Hex(4), Lit("-"), Hex(4), Lit("-"), Hex(12)});
}

}  // namespace

absl::StatusOr<Expr> SchemaCompiler::String(const SchemaJson& schema, const std::string& pointer) {
  absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minLength", pointer);
  if (!min.ok()) return min.status();
  absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxLength", pointer);
  if (!max.ok()) return max.status();
  if (schema.contains("format")) {
    if (min->has_value() || max->has_value()) return Error(pointer, "'format' next to 'minLength'/'maxLength' is not supported");
    if (!schema["format"].is_string()) return Error(pointer, "'format' must be a string");
    const std::string format = schema["format"].get<std::string>();
    Expr body;
    if (format == "date") {
      body = Date();
    } else if (format == "time") {
      body = Time();
    } else if (format == "date-time") {
      body = Expr::Seq({Date(), Lit("T"), Time()});
    } else if (format == "uuid") {
      body = Uuid();
    } else if (format == "email") {
      body = Email();
    } else if (format == "ipv4") {
      body = Ipv4();
    } else {
      return Error(pointer, absl::StrCat("'format' '", format,
                                         "' is not supported (supported: date, time, date-time, uuid, email, ipv4)"));
    }
    return Expr::Seq({Lit("\""), std::move(body), Lit("\"")});
  }
  if (!min->has_value() && !max->has_value()) return AnyString();
  const int64_t lo = min->value_or(0);
  std::optional<int64_t> hi = *max;
  if (hi.has_value() && *hi < lo) return Error(pointer, "'minLength' is above 'maxLength'");
  if (lo > limits_.max_repetition) {
    return Error(pointer, absl::StrCat("'minLength' ", lo, " is above the supported ", limits_.max_repetition));
  }
  // Above the limit, the maximum is narrowed (shorter strings still validate).
  if (hi.has_value() && *hi > limits_.max_repetition) hi = limits_.max_repetition;
  return Expr::Seq({Lit("\""),
                    Expr::Repeat(StringChar(), static_cast<int32_t>(lo),
                                 hi.has_value() ? std::optional<int32_t>(static_cast<int32_t>(*hi)) : std::nullopt),
                    Lit("\"")});
}

Expr SchemaCompiler::ExtraKey(const std::vector<std::string>& declared) {
  // The characters a key may start with: any string character except the first
  // characters of the declared names (so no key can equal one), escapes excluded.
  std::vector<CodepointRange> excluded = {{'"', '"'}, {'\\', '\\'}, {0, 0x1F}};
  bool empty_declared = false;
  for (const std::string& name : declared) {
    if (name.empty()) {
      empty_declared = true;
      continue;
    }
    size_t pos = 0;
    const char32_t c = DecodeUtf8At(name, &pos);
    excluded.push_back({c, c});
  }
  const Expr first = Expr::Class(ComplementRanges(NormalizeRanges(excluded)));
  const Expr rest = Expr::Star(Expr::Class(ComplementRanges(NormalizeRanges({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}))));
  Expr key = Expr::Seq({first, rest});
  if (!empty_declared) key = Expr::Optional(std::move(key));
  return Expr::Seq({Lit("\""), std::move(key), Lit("\"")});
}

}  // namespace kvtier::grammar
