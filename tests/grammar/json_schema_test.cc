// JSON schema -> grammar: what the grammars accept and refuse (through the Earley oracle,
// independent of the automaton), exact integer and number ranges, and errors that name the
// JSON pointer and the keyword.
#include <cmath>
#include <cstdlib>
#include <random>

#include "gmock/gmock.h"
#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/number_range.h"
#include "grammar_test_util.h"
#include "gtest/gtest.h"

namespace kvtier::grammar {
namespace {

using ::testing::HasSubstr;

Grammar Compile(const std::string& schema) {
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(schema);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << schema;
  if (!g.ok()) return Grammar();
  EXPECT_TRUE(Automaton::Build(*g).ok()) << g->ToGbnf();
  return *std::move(g);
}

bool Matches(const Grammar& g, std::string_view text) {
  testing::EarleyOracle oracle(g);
  return oracle.Append(text) && oracle.Complete();
}

TEST(JsonSchemaTest, ToolCallShapes) {
  Grammar g = Compile(R"({
    "type": "object",
    "properties": {
      "location": {"type": "string", "description": "city"},
      "unit": {"enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 14},
      "detailed": {"type": "boolean"}
    },
    "required": ["location"],
    "additionalProperties": false
  })");
  EXPECT_TRUE(Matches(g, R"({"location":"Paris"})"));
  EXPECT_TRUE(Matches(g, R"({"location": "Paris", "unit": "celsius", "days": 14, "detailed": false})"));
  EXPECT_TRUE(Matches(g, "{\n  \"location\": \"Z\\u00fcrich\",\n  \"days\": 3\n}"));
  EXPECT_FALSE(Matches(g, R"({"unit":"celsius"})"));                       // location is required
  EXPECT_FALSE(Matches(g, R"({"location":"P","days":15})"));               // out of range
  EXPECT_FALSE(Matches(g, R"({"location":"P","unit":"kelvin"})"));         // not in the enum
  EXPECT_FALSE(Matches(g, R"({"location":"P","extra":1})"));               // no additional properties
  EXPECT_FALSE(Matches(g, R"({"days":3,"location":"P"})"));                // schema order
  EXPECT_FALSE(Matches(g, R"( {"location":"P"})"));                        // no leading whitespace
  EXPECT_FALSE(Matches(g, "{\"location\":\"P\"}\n"));                      // nor trailing
  EXPECT_FALSE(Matches(g, "{\"location\":   \"P\"}"));                    // bounded whitespace
}

TEST(JsonSchemaTest, OptionalPropertiesAndCommas) {
  Grammar g = Compile(R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}}})");
  for (const char* ok : {"{}", "{ }", R"({"a":null})", R"({"b":null})", R"({"c":null})", R"({"a":null,"c":null})",
                         R"({"a":null,"b":null,"c":null})", R"({"b":null, "c":null})"}) {
    EXPECT_TRUE(Matches(g, ok)) << ok;
  }
  for (const char* bad : {R"({,"a":null})", R"({"a":null,})", R"({"a":null"b":null})", R"({"b":null,"a":null})"}) {
    EXPECT_FALSE(Matches(g, bad)) << bad;
  }
  // Many optional properties: the tails become rules; same language.
  std::string props;
  for (int i = 0; i < 12; ++i) props += std::string(i ? "," : "") + "\"p" + std::to_string(i) + "\":{\"type\":\"integer\"}";
  Grammar many = Compile("{\"type\":\"object\",\"properties\":{" + props + "},\"required\":[\"p11\"]}");
  EXPECT_TRUE(Matches(many, R"({"p11":1})"));
  EXPECT_TRUE(Matches(many, R"({"p0":1,"p5":2,"p11":3})"));
  EXPECT_FALSE(Matches(many, R"({"p0":1})"));
  EXPECT_FALSE(Matches(many, R"({"p5":1,"p0":2,"p11":3})"));
}

TEST(JsonSchemaTest, AdditionalPropertiesAndFreeObjects) {
  Grammar free = Compile(R"({"type":"object"})");
  EXPECT_TRUE(Matches(free, R"({"x":[1,{"y":null}],"z":"w"})"));
  Grammar extra = Compile(R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"],
                              "additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(Matches(extra, R"({"name":"a","x":1,"y":2})"));
  EXPECT_FALSE(Matches(extra, R"({"name":"a","x":"s"})"));
  EXPECT_FALSE(Matches(extra, R"({"name":"a","name":3})"));    // extra keys never repeat a declared name
  EXPECT_FALSE(Matches(extra, R"({"name":"a","nick":3})"));    // (nor start like one)
  Grammar required_only = Compile(R"({"required":["id"]})");
  EXPECT_TRUE(Matches(required_only, R"({"id":[true]})"));
  EXPECT_FALSE(Matches(required_only, R"({})"));
}

TEST(JsonSchemaTest, ArraysStringsAndFormats) {
  Grammar arr = Compile(R"({"type":"array","items":{"type":"string","maxLength":2},"minItems":1,"maxItems":3})");
  EXPECT_TRUE(Matches(arr, R"(["a"])"));
  EXPECT_TRUE(Matches(arr, R"(["a", "bc", ""])"));
  EXPECT_FALSE(Matches(arr, R"([])"));
  EXPECT_FALSE(Matches(arr, R"(["a","b","c","d"])"));
  EXPECT_FALSE(Matches(arr, R"(["abc"])"));
  EXPECT_TRUE(Matches(arr, R"(["\n\u00e9"])"));  // escapes count as one character
  Grammar lengths = Compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(Matches(lengths, "\"\xC3\xA9\xE2\x82\xAC\""));  // two characters, five bytes
  EXPECT_FALSE(Matches(lengths, "\"\xC3\xA9\""));
  EXPECT_FALSE(Matches(lengths, R"("\ud800x")"));  // surrogate escapes are left out
  Grammar date = Compile(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(Matches(date, R"("2024-12-31")"));
  EXPECT_FALSE(Matches(date, R"("2024-02-30")"));
  EXPECT_FALSE(Matches(date, R"("2024-13-01")"));
  Grammar dt = Compile(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(Matches(dt, R"("2024-01-02T03:04:05.123+01:00")"));
  EXPECT_TRUE(Matches(dt, R"("1999-11-30T23:59:59Z")"));
  Grammar ip = Compile(R"({"type":"string","format":"ipv4"})");
  EXPECT_TRUE(Matches(ip, R"("192.168.0.255")"));
  EXPECT_FALSE(Matches(ip, R"("192.168.0.256")"));
  EXPECT_FALSE(Matches(ip, R"("01.2.3.4")"));
  Grammar uuid = Compile(R"({"format":"uuid"})");
  EXPECT_TRUE(Matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
}

TEST(JsonSchemaTest, RefsRecursionAndCombinators) {
  Grammar tree = Compile(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Matches(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(Matches(tree, R"({"v":1,"kids":[{}]})"));
  Grammar root_ref = Compile(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})");
  EXPECT_TRUE(Matches(root_ref, "[1,[2,[]],3]"));
  Grammar any = Compile(R"({"anyOf":[{"type":"string"},{"type":"null"}]})");
  EXPECT_TRUE(Matches(any, "null"));
  EXPECT_TRUE(Matches(any, R"("x")"));
  Grammar tagged = Compile(R"({"oneOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},
      {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind"]}]})");
  EXPECT_TRUE(Matches(tagged, R"({"kind":"b","y":"s"})"));
  EXPECT_FALSE(Matches(tagged, R"({"kind":"a","y":"s"})"));
  Grammar types = Compile(R"({"type":["integer","boolean"]})");
  EXPECT_TRUE(Matches(types, "-7"));
  EXPECT_TRUE(Matches(types, "true"));
  EXPECT_FALSE(Matches(types, "1.5"));
  Grammar consts = Compile(R"({"enum":[1,"two",[3],{"four":4},null,true]})");
  EXPECT_TRUE(Matches(consts, R"({"four":4})"));
  EXPECT_TRUE(Matches(consts, R"("two")"));
  EXPECT_FALSE(Matches(consts, R"({"four": 4})"));
  Grammar single_all_of = Compile(R"({"allOf":[{"type":"boolean"}],"description":"d"})");
  EXPECT_TRUE(Matches(single_all_of, "false"));
}

TEST(JsonSchemaTest, IntegerRangesAreExact) {
  const std::optional<int64_t> bounds[] = {std::nullopt, -1000, -101, -100, -99, -10, -1, 0, 1, 9, 10, 99, 100, 101, 255, 1000};
  for (const auto& lo : bounds) {
    for (const auto& hi : bounds) {
      std::optional<Expr> e = IntegerRangeExpr(lo, hi);
      if (lo.has_value() && hi.has_value() && *lo > *hi) {
        EXPECT_FALSE(e.has_value());
        continue;
      }
      ASSERT_TRUE(e.has_value());
      Grammar g;
      g.set_root(g.RuleIndex("root"));
      g.SetBody(0, *e);
      testing::EarleyOracle oracle(g);
      const int far_step = testing::kSanitized ? 53 : 7, near_step = testing::kSanitized ? 3 : 1;
      for (int64_t n = -1100; n <= 1100; n += (n > -120 && n < 120) ? near_step : far_step) {
        const bool in = (!lo.has_value() || n >= *lo) && (!hi.has_value() || n <= *hi);
        oracle.Reset();
        const std::string text = std::to_string(n);
        EXPECT_EQ(oracle.Append(text) && oracle.Complete(), in) << n << " in [" << lo.value_or(-9999) << ", " << hi.value_or(9999) << "]";
      }
      oracle.Reset();
      // "-0" is a JSON integer (0); only the unbounded pattern allows it.
      EXPECT_EQ(oracle.Append("-0") && oracle.Complete(), !lo.has_value() && !hi.has_value());
      oracle.Reset();
      EXPECT_FALSE(oracle.Append("007") && oracle.Complete());
    }
  }
}

TEST(JsonSchemaTest, NumberRangesValidateAfterRounding) {
  // Random decimals through each grammar; whatever it accepts must satisfy the bounds
  // when parsed as a double (as JSON readers do), and values well inside must be accepted.
  struct Case {
    const char* schema;
    double lo, hi;
    bool lo_exclusive, hi_exclusive;
  } cases[] = {
      {R"({"type":"number","minimum":0,"maximum":1})", 0, 1, false, false},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", 0, 1, true, true},
      {R"({"type":"number","minimum":-5,"exclusiveMaximum":5})", -5, 5, false, true},
      {R"({"type":"number","exclusiveMinimum":-3,"maximum":-1})", -3, -1, true, false},
      {R"({"type":"number","minimum":0.5,"maximum":2.5})", 1, 2, false, false},
      {R"({"type":"number","exclusiveMinimum":1000000000,"exclusiveMaximum":1000000001})", 1e9, 1e9 + 1, true, true},
  };
  std::mt19937_64 rng(5);
  for (const Case& c : cases) {
    Grammar g = Compile(c.schema);
    testing::EarleyOracle oracle(g);
    int accepted = 0;
    for (int i = 0; i < (testing::kSanitized ? 600 : 3000); ++i) {
      // Around the bounds: integer parts near them, fractions of 0..20 digits.
      const double anchor = (rng() % 2) ? c.lo : c.hi;
      const int64_t whole = static_cast<int64_t>(std::floor(anchor)) + static_cast<int64_t>(rng() % 5) - 2;
      std::string text = (whole < 0 ? "-" : "") + std::to_string(std::llabs(whole));
      const int digits = static_cast<int>(rng() % 21);
      if (digits > 0) {
        text += ".";
        const int kind = static_cast<int>(rng() % 3);  // nines, zeros, random
        for (int d = 0; d < digits; ++d) text += kind == 0 ? '9' : kind == 1 ? (d + 1 == digits ? '1' : '0') : static_cast<char>('0' + rng() % 10);
      }
      if (whole == 0 && rng() % 2) text = "-" + text;
      oracle.Reset();
      if (!(oracle.Append(text) && oracle.Complete())) continue;
      ++accepted;
      const double x = std::strtod(text.c_str(), nullptr);
      EXPECT_TRUE(c.lo_exclusive ? x > c.lo : x >= c.lo) << c.schema << " accepted " << text;
      EXPECT_TRUE(c.hi_exclusive ? x < c.hi : x <= c.hi) << c.schema << " accepted " << text;
    }
    EXPECT_GT(accepted, testing::kSanitized ? 20 : 100) << c.schema;
  }
}

TEST(JsonSchemaTest, ErrorsNamePointerAndKeyword) {
  struct Case {
    const char* schema;
    const char* message;
  } cases[] = {
      {R"({"type":"string","pattern":"^a"})", "JSON schema at #: keyword 'pattern' is not supported"},
      {R"({"properties":{"a":{"type":"string","pattern":"x"}}})", "at #/properties/a: keyword 'pattern'"},
      {R"({"properties":{"a/b":{"multipleOf":2}}})", "at #/properties/a~1b: keyword 'multipleOf'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems': true is not supported"},
      {R"({"type":"string","format":"uri"})", "'format' 'uri' is not supported"},
      {R"({"$ref":"#/$defs/missing"})", "'$ref' '#/$defs/missing' does not resolve"},
      {R"({"$ref":"other.json#/a"})", "is not local"},
      {R"({"items":[{"type":"string"}]})", "'items' as an array"},
      {R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", "'oneOf' branches 0 and 1 may both match"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no integer satisfies"},
      {R"({"type":"strin"})", "'type' 'strin' is not a JSON schema type"},
      {R"({"anyOf":[{"type":"string"}],"minLength":2})", "'anyOf' next to 'minLength' is not supported"},
      {R"({"allOf":[{"type":"string"},{"minLength":1}]})", "'allOf' is supported with exactly one schema"},
      {R"({"not":{"type":"string"}})", "keyword 'not' is not supported"},
      {R"({"type":"object","properties":{"a":false}})", "at #/properties/a: the schema false matches no value"},
      {R"({"type":"object","minProperties":2})", "'minProperties' 2 above the 0 required"},
      {R"({"enum":[]})", "'enum' must be a non-empty array"},
      {R"({"type":"string","minLength":5,"maxLength":3})", "'minLength' is above 'maxLength'"},
      {"{\"type\":", "not valid JSON"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Grammar> g = JsonSchemaToGrammar(c.schema);
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(c.message)) << c.schema;
  }
  // Deep nesting is refused before parsing.
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "{\"items\":";
  deep += "{}";
  for (int i = 0; i < 1000; ++i) deep += "}";
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("nests deeper"));
}

}  // namespace
}  // namespace kvtier::grammar
