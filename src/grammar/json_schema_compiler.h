// SchemaCompiler: the implementation of JsonSchemaToGrammar (json_schema.h), split by the
// kind of value: json_schema.cc (dispatch, keywords, $ref, combinators, enum/const, any
// value), json_schema_objects.cc, json_schema_strings.cc, json_schema_numbers.cc and
// json_schema_oneof.cc (can two oneOf branches match the same value?).
// Internal to src/grammar. One compiler per schema; not thread-safe.
#ifndef KVTIER_GRAMMAR_JSON_SCHEMA_COMPILER_H_
#define KVTIER_GRAMMAR_JSON_SCHEMA_COMPILER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "nlohmann/json.hpp"

namespace kvtier::grammar {

using SchemaJson = nlohmann::ordered_json;

// JSON value kinds a schema may produce, as bits (integer and fraction together are
// "number").
enum : uint8_t {
  kTypeNull = 1,
  kTypeBoolean = 2,
  kTypeInteger = 4,
  kTypeFraction = 8,  // numbers that are not integers
  kTypeString = 16,
  kTypeArray = 32,
  kTypeObject = 64,
  kTypeNumber = kTypeInteger | kTypeFraction,
  kTypeAny = 127,
};

class SchemaCompiler {
 public:
  SchemaCompiler(const SchemaJson& root, const JsonSchemaLimits& limits) : root_(root), limits_(limits) {}

  absl::StatusOr<Grammar> Compile();

 private:
  // The value grammar of a (sub)schema, without surrounding whitespace.
  absl::StatusOr<Expr> Value(const SchemaJson& schema, const std::string& pointer, int depth);
  // A rule for a subschema (shared between identical subschemas), referenced.
  absl::StatusOr<Expr> ValueRule(const SchemaJson& schema, const std::string& pointer, int depth);
  // The rule of the schema a "$ref" names.
  absl::StatusOr<Expr> RefRule(const std::string& ref, const std::string& pointer, int depth);
  absl::StatusOr<const SchemaJson*> Resolve(const std::string& ref, const std::string& pointer) const;

  absl::StatusOr<Expr> Combinator(const SchemaJson& schema, const std::string& keyword, const std::string& pointer,
                                  int depth);
  absl::StatusOr<Expr> EnumOrConst(const SchemaJson& schema, const std::string& pointer);
  absl::StatusOr<uint8_t> Types(const SchemaJson& schema, const std::string& pointer) const;

  // json_schema_objects.cc
  absl::StatusOr<Expr> Object(const SchemaJson& schema, const std::string& pointer, int depth);
  absl::StatusOr<Expr> Array(const SchemaJson& schema, const std::string& pointer, int depth);
  // json_schema_strings.cc
  absl::StatusOr<Expr> String(const SchemaJson& schema, const std::string& pointer);
  // A key for an additional property: no escapes, first character unlike any declared name's.
  Expr ExtraKey(const std::vector<std::string>& declared);
  // json_schema_numbers.cc
  absl::StatusOr<Expr> Number(const SchemaJson& schema, const std::string& pointer, bool integer);
  // json_schema_oneof.cc: InvalidArgument naming two branches that may match one value.
  absl::Status CheckOneOfDisjoint(const SchemaJson& branches, const std::string& pointer) const;

  // Shared pieces, each one rule (or expression) per grammar.
  Expr Ws() const;
  Expr StringChar() const;  // one JSON string character, raw or escaped
  Expr AnyString();         // rule
  Expr AnyValue();          // rule (recursive: objects, arrays, strings, numbers, ...)
  Expr AnyObject();         // rule: any object
  Expr AnyNumber();         // rule
  Expr AnyInteger();        // rule
  int32_t SharedRule(std::string_view name, Expr (SchemaCompiler::*body)());
  Expr AnyValueBody();
  Expr AnyObjectBody();
  Expr AnyArrayBody();
  Expr AnyStringBody();
  Expr AnyNumberBody();
  Expr AnyIntegerBody();

  absl::Status Error(const std::string& pointer, std::string_view message) const;
  // schema[key] as a count (a non-negative integer; above 10^9 reads as 10^9), nullopt
  // when absent.
  absl::StatusOr<std::optional<int64_t>> Count(const SchemaJson& schema, const char* key,
                                               const std::string& pointer) const;
  static std::string Child(const std::string& pointer, std::string_view token);
  // A compact JSON literal of v.
  static Expr JsonLiteral(const SchemaJson& v);

  const SchemaJson& root_;
  const JsonSchemaLimits& limits_;
  Grammar grammar_;
  absl::flat_hash_map<std::string, int32_t> ref_rules_;     // "$ref" target -> rule
  absl::flat_hash_map<std::string, int32_t> schema_rules_;  // compact schema text -> rule
  absl::flat_hash_map<std::string, int32_t> shared_rules_;  // name -> rule
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_JSON_SCHEMA_COMPILER_H_
