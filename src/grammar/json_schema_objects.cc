// SchemaCompiler::Object and ::Array (json_schema.h).
//
// Object members come in the order of "properties". With optional properties the first
// member written may be any of them up to the first required one, and each later member
// carries its leading comma:
//   object := "{" ws first ws "}"          (or "{" ws (first ws)? "}" when none is required)
//   first  := member_j tail(j+1)           for each candidate j
//   tail(i):= ("," member_i)[?] ... ("," extra)*
// When the candidates times the members would make the rule large, tail(i) become rules
// of their own, each calling the next.
#include "absl/strings/str_cat.h"
#include "grammar/json_schema_compiler.h"

namespace kvtier::grammar {
namespace {

constexpr size_t kInlineTailBudget = 64;

}  // namespace

absl::StatusOr<Expr> SchemaCompiler::Object(const SchemaJson& schema, const std::string& pointer, int depth) {
  static const SchemaJson kAnything = true;
  std::vector<std::string> names;
  std::vector<const SchemaJson*> schemas;
  std::vector<bool> required;
  if (schema.contains("properties")) {
    const SchemaJson& props = schema["properties"];
    if (!props.is_object()) return Error(pointer, "'properties' must be an object");
    for (const auto& [name, sub] : props.items()) {
      names.push_back(name);
      schemas.push_back(&sub);
      required.push_back(false);
    }
  }
  if (schema.contains("required")) {
    const SchemaJson& req = schema["required"];
    if (!req.is_array()) return Error(pointer, "'required' must be an array of strings");
    for (const SchemaJson& r : req) {
      if (!r.is_string()) return Error(pointer, "'required' must be an array of strings");
      const std::string name = r.get<std::string>();
      auto it = std::find(names.begin(), names.end(), name);
      if (it == names.end()) {
        // Required without a schema of its own: any value.
        names.push_back(name);
        schemas.push_back(&kAnything);
        required.push_back(true);
      } else {
        required[static_cast<size_t>(it - names.begin())] = true;
      }
    }
  }
  enum class Extra { kNone, kAny, kSchema };
  Extra extra = names.empty() ? Extra::kAny : Extra::kNone;
  const SchemaJson* extra_schema = nullptr;
  if (schema.contains("additionalProperties")) {
    const SchemaJson& a = schema["additionalProperties"];
    if (a.is_boolean()) {
      extra = a.get<bool>() ? Extra::kAny : Extra::kNone;
    } else if (a.is_object()) {
      extra = a.empty() ? Extra::kAny : Extra::kSchema;
      extra_schema = &a;
    } else {
      return Error(pointer, "'additionalProperties' must be a boolean or a schema");
    }
  }
  const size_t n = names.size();
  const size_t num_required = static_cast<size_t>(std::count(required.begin(), required.end(), true));
  absl::StatusOr<std::optional<int64_t>> min_props = Count(schema, "minProperties", pointer);
  if (!min_props.ok()) return min_props.status();
  absl::StatusOr<std::optional<int64_t>> max_props = Count(schema, "maxProperties", pointer);
  if (!max_props.ok()) return max_props.status();
  if (min_props->has_value() && static_cast<int64_t>(num_required) < **min_props) {
    return Error(pointer, absl::StrCat("'minProperties' ", **min_props, " above the ", num_required,
                                       " required properties is not supported"));
  }
  if (max_props->has_value() && (extra != Extra::kNone || static_cast<int64_t>(n) > **max_props)) {
    return Error(pointer, "'maxProperties' is supported only when the declared properties, without additional ones, "
                          "are at most that many");
  }
  if (n == 0 && extra == Extra::kAny) return AnyObject();

  const Expr sep = Expr::Seq({Ws(), Expr::Literal(","), Ws()});
  std::vector<Expr> members;
  const std::string props_pointer = Child(pointer, "properties");
  for (size_t j = 0; j < n; ++j) {
    absl::StatusOr<Expr> value = ValueRule(*schemas[j], Child(props_pointer, names[j]), depth + 1);
    if (!value.ok()) return value.status();
    members.push_back(Expr::Seq({Expr::Literal(SchemaJson(names[j]).dump()), Ws(), Expr::Literal(":"), Ws(),
                                 std::move(*value)}));
  }
  Expr extras_tail = Expr::Empty();
  std::optional<Expr> extra_member;
  if (extra != Extra::kNone) {
    Expr value = AnyValue();
    if (extra == Extra::kSchema) {
      absl::StatusOr<Expr> v = ValueRule(*extra_schema, Child(pointer, "additionalProperties"), depth + 1);
      if (!v.ok()) return v.status();
      value = std::move(*v);
    }
    extra_member = Expr::Seq({n == 0 ? AnyString() : ExtraKey(names), Ws(), Expr::Literal(":"), Ws(), std::move(value)});
    extras_tail = Expr::Star(Expr::Seq({sep, *extra_member}));
  }
  if (n == 0 && !extra_member.has_value()) {
    return Expr::Seq({Expr::Literal("{"), Ws(), Expr::Literal("}")});
  }

  const size_t first_required = static_cast<size_t>(std::find(required.begin(), required.end(), true) - required.begin());
  const size_t candidates = first_required < n ? first_required + 1 : n;
  auto tail_item = [&](size_t i) {
    Expr item = Expr::Seq({sep, members[i]});
    return required[i] ? item : Expr::Optional(std::move(item));
  };
  // tails[i]: what may follow once a member before i has been written.
  std::vector<Expr> tails(n + 1);
  if (candidates * n > kInlineTailBudget) {
    int32_t next = grammar_.NewRule(absl::StrCat(pointer.empty() ? "root" : pointer.substr(pointer.find_last_of('/') + 1), "-rest"));
    grammar_.SetBody(next, extras_tail);
    tails[n] = Expr::Ref(next);
    for (size_t i = n; i-- > 0;) {
      const int32_t rule = grammar_.NewRule(grammar_.rules()[static_cast<size_t>(next)].name);
      grammar_.SetBody(rule, Expr::Seq({tail_item(i), Expr::Ref(next)}));
      tails[i] = Expr::Ref(rule);
      next = rule;
    }
  } else {
    tails[n] = extras_tail;
    for (size_t i = n; i-- > 0;) tails[i] = Expr::Seq({tail_item(i), tails[i + 1]});
  }
  std::vector<Expr> firsts;
  for (size_t j = 0; j < candidates; ++j) firsts.push_back(Expr::Seq({members[j], tails[j + 1]}));
  if (extra_member.has_value() && first_required == n) firsts.push_back(Expr::Seq({*extra_member, extras_tail}));
  Expr first = Expr::Choice(std::move(firsts));
  if (first_required < n) {
    return Expr::Seq({Expr::Literal("{"), Ws(), std::move(first), Ws(), Expr::Literal("}")});
  }
  return Expr::Seq({Expr::Literal("{"), Ws(), Expr::Optional(Expr::Seq({std::move(first), Ws()})), Expr::Literal("}")});
}

absl::StatusOr<Expr> SchemaCompiler::Array(const SchemaJson& schema, const std::string& pointer, int depth) {
  if (schema.contains("uniqueItems")) {
    const SchemaJson& u = schema["uniqueItems"];
    if (!u.is_boolean()) return Error(pointer, "'uniqueItems' must be a boolean");
    if (u.get<bool>()) return Error(pointer, "'uniqueItems': true is not supported");
  }
  absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minItems", pointer);
  if (!min.ok()) return min.status();
  absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxItems", pointer);
  if (!max.ok()) return max.status();
  const int64_t lo = min->value_or(0);
  std::optional<int64_t> hi = *max;
  if (hi.has_value() && *hi < lo) return Error(pointer, "'minItems' is above 'maxItems'");
  if (lo > limits_.max_repetition) {
    return Error(pointer, absl::StrCat("'minItems' ", lo, " is above the supported ", limits_.max_repetition));
  }
  if (hi.has_value() && *hi > limits_.max_repetition) hi = limits_.max_repetition;
  const Expr empty = Expr::Seq({Expr::Literal("["), Ws(), Expr::Literal("]")});
  Expr item = AnyValue();
  if (schema.contains("items")) {
    const SchemaJson& items = schema["items"];
    if (items.is_array()) return Error(pointer, "'items' as an array (a tuple) is not supported");
    if (items.is_boolean() && !items.get<bool>()) {
      if (lo > 0) return Error(pointer, "'items': false with 'minItems' above 0 matches no array");
      return empty;
    }
    absl::StatusOr<Expr> v = ValueRule(items, Child(pointer, "items"), depth + 1);
    if (!v.ok()) return v.status();
    item = std::move(*v);
  }
  if (hi.has_value() && *hi == 0) return empty;
  const Expr sep = Expr::Seq({Ws(), Expr::Literal(","), Ws()});
  Expr list = Expr::Seq({item, Expr::Repeat(Expr::Seq({sep, item}), static_cast<int32_t>(std::max<int64_t>(lo - 1, 0)),
                                            hi.has_value() ? std::optional<int32_t>(static_cast<int32_t>(*hi - 1)) : std::nullopt)});
  if (lo == 0) {
    return Expr::Seq({Expr::Literal("["), Ws(), Expr::Optional(Expr::Seq({std::move(list), Ws()})), Expr::Literal("]")});
  }
  return Expr::Seq({Expr::Literal("["), Ws(), std::move(list), Ws(), Expr::Literal("]")});
}

}  // namespace kvtier::grammar
