// JsonSchemaToGrammar: a JSON schema, in the subset tool definitions use, into a Grammar
// whose sentences are JSON texts that validate against the schema.
//
// Supported: type (one or a list); object with properties (in their order), required,
// additionalProperties (false, true or a schema; absent means none when properties are
// given, any when not), minProperties/maxProperties when the required/declared counts
// already satisfy them; array with items, minItems, maxItems (uniqueItems false);
// string with enum/const, minLength/maxLength, format date, time, date-time, uuid, email,
// ipv4; integer and number with minimum/maximum/exclusiveMinimum/exclusiveMaximum (also the
// draft-4 boolean form); boolean; null; enum and const of any type; anyOf; oneOf (when its
// branches cannot both match: different types, different enum/const values, or objects
// told apart by a required property with different const values); allOf of one schema;
// $ref to "#" or any "#/..." pointer ($defs, definitions), recursion included; true/{}.
// Annotations (title, description, default, examples, $comment, $schema, $id, deprecated,
// readOnly, writeOnly, contentEncoding, contentMediaType) are ignored. Anything else —
// pattern, multipleOf, uniqueItems: true, not, if/then/else, patternProperties, ... — is
// refused with InvalidArgument "JSON schema at <JSON pointer>: <keyword> ...".
//
// Ranges are exact for integers. Number bounds are exact when they are integers; a
// fractional bound is rounded inward to an integer (minimum 0.5 allows numbers >= 1), and
// bounds beyond +-10^15 are narrowed to it: the output always validates, the range it can
// take may be narrower than the schema's.
//
// Whitespace: between JSON tokens the output may have nothing, one space, or a newline
// followed by up to 20 spaces or tabs; none before or after the top-level value. Bounded
// whitespace means a sampler cannot loop on it. Object members come in schema order, the
// additional ones (when allowed, with keys that are not declared names and have no escapes)
// after them. Stateless; thread-safe.
#ifndef KVTIER_GRAMMAR_JSON_SCHEMA_H_
#define KVTIER_GRAMMAR_JSON_SCHEMA_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace kvtier::grammar {

struct JsonSchemaLimits {
  size_t max_text_bytes = 1 << 20;
  int32_t max_depth = 64;          // nested subschemas (recursion through $ref is not depth)
  int32_t max_repetition = 2000;   // maxItems / maxLength enforced exactly up to this
};

absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json, const JsonSchemaLimits& limits = {});

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_JSON_SCHEMA_H_
