// JsonSchemaToGrammar and the SchemaCompiler's dispatch: keywords, $ref, combinators,
// enum/const and the any-value rules (json_schema.h, json_schema_compiler.h).
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grammar/json_schema_compiler.h"

namespace kvtier::grammar {
namespace {

const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* set = new absl::flat_hash_set<std::string>{
      "title", "description", "default", "examples", "$comment", "$schema", "$id", "deprecated", "readOnly",
      "writeOnly", "contentEncoding", "contentMediaType", "$defs", "definitions"};
  return *set;
}

const absl::flat_hash_set<std::string>& ObjectKeywords() {
  static const auto* set = new absl::flat_hash_set<std::string>{"properties", "required", "additionalProperties",
                                                                      "minProperties", "maxProperties"};
  return *set;
}
const absl::flat_hash_set<std::string>& ArrayKeywords() {
  static const auto* set = new absl::flat_hash_set<std::string>{"items", "minItems", "maxItems", "uniqueItems"};
  return *set;
}
const absl::flat_hash_set<std::string>& StringKeywords() {
  static const auto* set = new absl::flat_hash_set<std::string>{"minLength", "maxLength", "format"};
  return *set;
}
const absl::flat_hash_set<std::string>& NumberKeywords() {
  static const auto* set =
      new absl::flat_hash_set<std::string>{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  return *set;
}
const absl::flat_hash_set<std::string>& StructureKeywords() {
  static const auto* set =
      new absl::flat_hash_set<std::string>{"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"};
  return *set;
}

// The deepest bracket nesting of a JSON text (outside strings), to refuse hostile depth
// before parsing.
int BracketDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::string PercentDecode(std::string_view s) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json, const JsonSchemaLimits& limits) {
  if (schema_json.size() > limits.max_text_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("JSON schema is ", schema_json.size(), " bytes; the limit is ",
                                                   limits.max_text_bytes));
  }
  if (BracketDepth(schema_json) > 4 * limits.max_depth) {
    return absl::InvalidArgumentError(absl::StrCat("JSON schema nests deeper than ", 4 * limits.max_depth, " levels"));
  }
  SchemaJson schema;
  try {
    schema = SchemaJson::parse(schema_json);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("JSON schema is not valid JSON: ", e.what()));
  }
  return SchemaCompiler(schema, limits).Compile();
}

absl::StatusOr<Grammar> SchemaCompiler::Compile() {
  const int32_t root = grammar_.RuleIndex("root");
  grammar_.set_root(root);
  ref_rules_.emplace("", root);
  absl::StatusOr<Expr> body = Value(root_, "", 0);
  if (!body.ok()) return body.status();
  grammar_.SetBody(root, std::move(*body));
  return std::move(grammar_);
}

absl::Status SchemaCompiler::Error(const std::string& pointer, std::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat("JSON schema at #", pointer, ": ", std::string(message)));
}

absl::StatusOr<std::optional<int64_t>> SchemaCompiler::Count(const SchemaJson& schema, const char* key,
                                                             const std::string& pointer) const {
  if (!schema.contains(key)) return std::optional<int64_t>();
  const SchemaJson& v = schema[key];
  const bool integral = v.is_number_integer() || v.is_number_unsigned() ||
                        (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (!integral || v.get<double>() < 0) return Error(pointer, absl::StrCat("'", key, "' must be a non-negative integer"));
  const double d = v.get<double>();
  return std::optional<int64_t>(d > 1e9 ? int64_t{1000000000} : static_cast<int64_t>(d));
}

std::string SchemaCompiler::Child(const std::string& pointer, std::string_view token) {
  std::string out = pointer + "/";
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Expr SchemaCompiler::JsonLiteral(const SchemaJson& v) { return Expr::Literal(v.dump()); }

absl::StatusOr<Expr> SchemaCompiler::Value(const SchemaJson& schema, const std::string& pointer, int depth) {
  if (depth > limits_.max_depth) return Error(pointer, absl::StrCat("schemas nest deeper than ", limits_.max_depth));
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return AnyValue();
    return Error(pointer, "the schema false matches no value");
  }
  if (!schema.is_object()) return Error(pointer, "a schema must be an object or a boolean");
  std::vector<std::string> constraints;
  for (const auto& [key, value] : schema.items()) {
    if (Annotations().contains(key)) continue;
    if (!StructureKeywords().contains(key) && !ObjectKeywords().contains(key) && !ArrayKeywords().contains(key) &&
        !StringKeywords().contains(key) && !NumberKeywords().contains(key)) {
      return Error(pointer, absl::StrCat("keyword '", key, "' is not supported"));
    }
    constraints.push_back(key);
  }
  auto others = [&](std::initializer_list<std::string_view> allowed) -> std::optional<std::string> {
    for (const std::string& k : constraints) {
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) return k;
    }
    return std::nullopt;
  };
  if (schema.contains("$ref")) {
    if (auto other = others({"$ref"})) return Error(pointer, absl::StrCat("'$ref' next to '", *other, "' is not supported"));
    if (!schema["$ref"].is_string()) return Error(pointer, "'$ref' must be a string");
    return RefRule(schema["$ref"].get<std::string>(), pointer, depth);
  }
  if (schema.contains("allOf")) {
    const SchemaJson& all = schema["allOf"];
    if (!all.is_array() || all.size() != 1) {
      return Error(pointer, "'allOf' is supported with exactly one schema");
    }
    if (auto other = others({"allOf"})) return Error(pointer, absl::StrCat("'allOf' next to '", *other, "' is not supported"));
    return Value(all[0], Child(Child(pointer, "allOf"), "0"), depth + 1);
  }
  for (const char* keyword : {"anyOf", "oneOf"}) {
    if (!schema.contains(keyword)) continue;
    if (auto other = others({keyword})) {
      return Error(pointer, absl::StrCat("'", keyword, "' next to '", *other, "' is not supported"));
    }
    return Combinator(schema, keyword, pointer, depth);
  }
  if (schema.contains("enum") || schema.contains("const")) {
    if (auto other = others({"enum", "const", "type"})) {
      return Error(pointer, absl::StrCat("'", schema.contains("enum") ? "enum" : "const", "' next to '", *other,
                                         "' is not supported"));
    }
    return EnumOrConst(schema, pointer);
  }
  absl::StatusOr<uint8_t> types = Types(schema, pointer);
  if (!types.ok()) return types.status();
  if (*types == kTypeAny && constraints.empty()) return AnyValue();
  std::vector<Expr> alternatives;
  if (*types & kTypeNull) alternatives.push_back(Expr::Literal("null"));
  if (*types & kTypeBoolean) alternatives.push_back(Expr::Choice({Expr::Literal("true"), Expr::Literal("false")}));
  if (*types & (kTypeInteger | kTypeFraction)) {
    absl::StatusOr<Expr> n = Number(schema, pointer, /*integer=*/(*types & kTypeFraction) == 0);
    if (!n.ok()) return n.status();
    alternatives.push_back(std::move(*n));
  }
  if (*types & kTypeString) {
    absl::StatusOr<Expr> s = String(schema, pointer);
    if (!s.ok()) return s.status();
    alternatives.push_back(std::move(*s));
  }
  if (*types & kTypeArray) {
    absl::StatusOr<Expr> a = Array(schema, pointer, depth);
    if (!a.ok()) return a.status();
    alternatives.push_back(std::move(*a));
  }
  if (*types & kTypeObject) {
    absl::StatusOr<Expr> o = Object(schema, pointer, depth);
    if (!o.ok()) return o.status();
    alternatives.push_back(std::move(*o));
  }
  return Expr::Choice(std::move(alternatives));
}

absl::StatusOr<uint8_t> SchemaCompiler::Types(const SchemaJson& schema, const std::string& pointer) const {
  auto one = [&](const SchemaJson& name) -> absl::StatusOr<uint8_t> {
    if (!name.is_string()) return Error(pointer, "'type' must be a string or an array of strings");
    const std::string n = name.get<std::string>();
    if (n == "null") return kTypeNull;
    if (n == "boolean") return kTypeBoolean;
    if (n == "integer") return kTypeInteger;
    if (n == "number") return kTypeNumber;
    if (n == "string") return kTypeString;
    if (n == "array") return kTypeArray;
    if (n == "object") return kTypeObject;
    return Error(pointer, absl::StrCat("'type' '", n, "' is not a JSON schema type"));
  };
  if (schema.contains("type")) {
    const SchemaJson& t = schema["type"];
    if (!t.is_array()) return one(t);
    if (t.empty()) return Error(pointer, "'type' is an empty array");
    uint8_t types = 0;
    for (const SchemaJson& name : t) {
      absl::StatusOr<uint8_t> bit = one(name);
      if (!bit.ok()) return bit.status();
      types |= *bit;
    }
    return types;
  }
  // No "type": the kinds the keywords speak of, or any value.
  uint8_t types = 0;
  for (const auto& [key, value] : schema.items()) {
    if (ObjectKeywords().contains(key)) types |= kTypeObject;
    if (ArrayKeywords().contains(key)) types |= kTypeArray;
    if (StringKeywords().contains(key)) types |= kTypeString;
    if (NumberKeywords().contains(key)) types |= kTypeNumber;
  }
  return types == 0 ? static_cast<uint8_t>(kTypeAny) : types;
}

absl::StatusOr<Expr> SchemaCompiler::EnumOrConst(const SchemaJson& schema, const std::string& pointer) {
  std::vector<const SchemaJson*> values;
  const char* keyword = schema.contains("const") ? "const" : "enum";
  if (schema.contains("const")) {
    values.push_back(&schema["const"]);
    if (schema.contains("enum")) return Error(pointer, "'const' next to 'enum' is not supported");
  } else {
    const SchemaJson& e = schema["enum"];
    if (!e.is_array() || e.empty()) return Error(pointer, "'enum' must be a non-empty array");
    for (const SchemaJson& v : e) values.push_back(&v);
  }
  uint8_t types = kTypeAny;
  if (schema.contains("type")) {
    absl::StatusOr<uint8_t> t = Types(schema, pointer);
    if (!t.ok()) return t.status();
    types = *t;
  }
  std::vector<Expr> alternatives;
  absl::flat_hash_set<std::string> seen;
  for (const SchemaJson* v : values) {
    const int kind = v->is_null() ? kTypeNull
                   : v->is_boolean() ? kTypeBoolean
                   : v->is_number_integer() || v->is_number_unsigned() ? kTypeInteger
                   : v->is_number() ? kTypeFraction
                   : v->is_string() ? kTypeString
                   : v->is_array() ? kTypeArray
                                   : kTypeObject;
    if ((kind & types) == 0) continue;
    std::string text = v->dump();
    if (seen.insert(text).second) alternatives.push_back(Expr::Literal(text));
  }
  if (alternatives.empty()) return Error(pointer, absl::StrCat("no '", keyword, "' value has the schema's 'type'"));
  return Expr::Choice(std::move(alternatives));
}

absl::StatusOr<Expr> SchemaCompiler::Combinator(const SchemaJson& schema, const std::string& keyword,
                                                const std::string& pointer, int depth) {
  const SchemaJson& branches = schema[keyword];
  if (!branches.is_array() || branches.empty()) {
    return Error(pointer, absl::StrCat("'", keyword, "' must be a non-empty array of schemas"));
  }
  if (keyword == "oneOf") {
    if (absl::Status s = CheckOneOfDisjoint(branches, pointer); !s.ok()) return s;
  }
  std::vector<Expr> alternatives;
  for (size_t i = 0; i < branches.size(); ++i) {
    absl::StatusOr<Expr> branch = ValueRule(branches[i], Child(Child(pointer, keyword), std::to_string(i)), depth + 1);
    if (!branch.ok()) return branch.status();
    alternatives.push_back(std::move(*branch));
  }
  return Expr::Choice(std::move(alternatives));
}

absl::StatusOr<const SchemaJson*> SchemaCompiler::Resolve(const std::string& ref, const std::string& pointer) const {
  if (ref.empty() || ref[0] != '#') {
    return Error(pointer, absl::StrCat("'$ref' '", ref, "' is not local: only '#...' references are supported"));
  }
  const std::string target = PercentDecode(std::string_view(ref).substr(1));
  if (target.empty()) return &root_;
  try {
    const SchemaJson::json_pointer p(target);
    if (!root_.contains(p)) return Error(pointer, absl::StrCat("'$ref' '", ref, "' does not resolve"));
    return &root_.at(p);
  } catch (const nlohmann::json::exception&) {
    return Error(pointer, absl::StrCat("'$ref' '", ref, "' is not a JSON pointer"));
  }
}

absl::StatusOr<Expr> SchemaCompiler::RefRule(const std::string& ref, const std::string& pointer, int depth) {
  absl::StatusOr<const SchemaJson*> target = Resolve(ref, pointer);
  if (!target.ok()) return target.status();
  const std::string key = PercentDecode(std::string_view(ref).substr(1));
  auto it = ref_rules_.find(key);
  if (it != ref_rules_.end()) return Expr::Ref(it->second);
  const size_t slash = key.find_last_of('/');
  const int32_t rule = grammar_.NewRule(slash == std::string::npos ? key : key.substr(slash + 1));
  ref_rules_.emplace(key, rule);
  absl::StatusOr<Expr> body = Value(**target, key, depth + 1);
  if (!body.ok()) return body.status();
  grammar_.SetBody(rule, std::move(*body));
  return Expr::Ref(rule);
}

absl::StatusOr<Expr> SchemaCompiler::ValueRule(const SchemaJson& schema, const std::string& pointer, int depth) {
  // Literals stay inline: their tokens then match within the enclosing rule.
  if (schema.is_object() && (schema.contains("enum") || schema.contains("const"))) return Value(schema, pointer, depth);
  const std::string key = schema.dump();
  auto it = schema_rules_.find(key);
  if (it != schema_rules_.end()) return Expr::Ref(it->second);
  absl::StatusOr<Expr> body = Value(schema, pointer, depth);
  if (!body.ok()) return body.status();
  // A bare reference needs no rule of its own.
  if (body->kind == Expr::Kind::kRuleRef) {
    schema_rules_.emplace(key, body->rule);
    return body;
  }
  const size_t slash = pointer.find_last_of('/');
  std::string name = slash == std::string::npos ? pointer : pointer.substr(slash + 1);
  if (!name.empty() && absl::ascii_isdigit(static_cast<unsigned char>(name[0])) && slash != std::string::npos && slash > 0) {
    const size_t before = pointer.find_last_of('/', slash - 1);
    name = absl::StrCat(pointer.substr(before == std::string::npos ? 0 : before + 1, slash - before - 1), "-", name);
  }
  const int32_t rule = grammar_.NewRule(name.empty() ? "value" : name);
  grammar_.SetBody(rule, std::move(*body));
  schema_rules_.emplace(key, rule);
  return Expr::Ref(rule);
}

Expr SchemaCompiler::Ws() const {
  return Expr::Choice({Expr::Empty(), Expr::Literal(" "),
                       Expr::Seq({Expr::Literal("\n"), Expr::Repeat(Expr::Class({{' ', ' '}, {'\t', '\t'}}), 0, 20)})});
}

Expr SchemaCompiler::StringChar() const {
  const Expr hex = Expr::Class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
  // \u escapes of surrogates are left out: each escape is then exactly one character.
  const Expr unicode = Expr::Choice(
      {Expr::Seq({Expr::Class({{'0', '9'}, {'a', 'c'}, {'A', 'C'}}), hex, hex, hex}),
       Expr::Seq({Expr::Class({{'d', 'd'}, {'D', 'D'}}), Expr::Class({{'0', '7'}}), hex, hex}),
       Expr::Seq({Expr::Class({{'e', 'f'}, {'E', 'F'}}), hex, hex, hex})});
  return Expr::Choice(
      {Expr::Class(ComplementRanges(NormalizeRanges({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}))),
       Expr::Seq({Expr::Literal("\\"),
                  Expr::Choice({Expr::Class({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'},
                                             {'r', 'r'}, {'t', 't'}}),
                                Expr::Seq({Expr::Literal("u"), unicode})})})});
}

int32_t SchemaCompiler::SharedRule(std::string_view name, Expr (SchemaCompiler::*body)()) {
  auto it = shared_rules_.find(std::string(name));
  if (it != shared_rules_.end()) return it->second;
  const int32_t rule = grammar_.NewRule(name);
  shared_rules_.emplace(std::string(name), rule);
  grammar_.SetBody(rule, (this->*body)());
  return rule;
}

Expr SchemaCompiler::AnyString() { return Expr::Ref(SharedRule("json-string", &SchemaCompiler::AnyStringBody)); }
Expr SchemaCompiler::AnyValue() { return Expr::Ref(SharedRule("json-value", &SchemaCompiler::AnyValueBody)); }
Expr SchemaCompiler::AnyObject() { return Expr::Ref(SharedRule("json-object", &SchemaCompiler::AnyObjectBody)); }
Expr SchemaCompiler::AnyNumber() { return Expr::Ref(SharedRule("json-number", &SchemaCompiler::AnyNumberBody)); }
Expr SchemaCompiler::AnyInteger() { return Expr::Ref(SharedRule("json-integer", &SchemaCompiler::AnyIntegerBody)); }

Expr SchemaCompiler::AnyStringBody() {
  return Expr::Seq({Expr::Literal("\""), Expr::Star(StringChar()), Expr::Literal("\"")});
}

Expr SchemaCompiler::AnyValueBody() {
  const Expr object = AnyObject();
  const Expr array = Expr::Ref(SharedRule("json-array", &SchemaCompiler::AnyArrayBody));
  return Expr::Choice({object, array, AnyString(), AnyNumber(), Expr::Literal("true"), Expr::Literal("false"),
                       Expr::Literal("null")});
}

Expr SchemaCompiler::AnyObjectBody() {
  const Expr member = Expr::Seq({AnyString(), Ws(), Expr::Literal(":"), Ws(), AnyValue()});
  return Expr::Seq(
      {Expr::Literal("{"), Ws(),
       Expr::Optional(Expr::Seq({member, Expr::Star(Expr::Seq({Ws(), Expr::Literal(","), Ws(), member})), Ws()})),
       Expr::Literal("}")});
}

Expr SchemaCompiler::AnyArrayBody() {
  const Expr item = AnyValue();
  return Expr::Seq(
      {Expr::Literal("["), Ws(),
       Expr::Optional(Expr::Seq({item, Expr::Star(Expr::Seq({Ws(), Expr::Literal(","), Ws(), item})), Ws()})),
       Expr::Literal("]")});
}

}  // namespace kvtier::grammar
