// GBNF parser: the syntax llama.cpp grammars use, the printer round trip, and errors that
// name the line and column.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "grammar/automaton.h"
#include "grammar/gbnf_parser.h"
#include "grammar/utf8.h"
#include "grammar_test_util.h"
#include "gtest/gtest.h"

namespace kvtier::grammar {
namespace {

using ::testing::HasSubstr;

std::string ReadGrammarFile(const std::string& name) {
  std::ifstream in(std::filesystem::path(KVTIER_SOURCE_DIR) / "tests/grammar/grammars" / name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool GbnfMatches(const Grammar& g, std::string_view text) {
  testing::EarleyOracle oracle(g);
  return oracle.Append(text) && oracle.Complete();
}

TEST(GbnfParserTest, ParsesTheGrammarFiles) {
  for (const char* name : {"json.gbnf", "arithmetic.gbnf", "list.gbnf"}) {
    absl::StatusOr<Grammar> g = ParseGbnf(ReadGrammarFile(name));
    ASSERT_TRUE(g.ok()) << name << ": " << g.status();
    EXPECT_TRUE(Automaton::Build(*g).ok()) << name;
  }
  Grammar json = *ParseGbnf(ReadGrammarFile("json.gbnf"));
  EXPECT_TRUE(GbnfMatches(json, R"({"a": [1, -2.5e3, true, null, "x\u00e9\n"], "b": {}})"));
  EXPECT_TRUE(GbnfMatches(json, "{\n  \"k\": \"\xC3\xA9\"}"));
  EXPECT_FALSE(GbnfMatches(json, R"({"a": 01})"));
  EXPECT_FALSE(GbnfMatches(json, R"({"a": "x)"));
  Grammar arith = *ParseGbnf(ReadGrammarFile("arithmetic.gbnf"));
  EXPECT_TRUE(GbnfMatches(arith, "(1 + 2.5) * -3/4"));
  EXPECT_FALSE(GbnfMatches(arith, "1 +"));
  Grammar list = *ParseGbnf(ReadGrammarFile("list.gbnf"));
  EXPECT_TRUE(GbnfMatches(list, "- one\n- two \xE2\x82\xAC\n"));
  EXPECT_FALSE(GbnfMatches(list, "- one\r\n"));
}

// The constructs of llama.cpp's own grammars: rules spanning lines inside parentheses,
// comments after items, an empty first alternative, hex/unicode escapes in classes,
// {m}, {m,n}, ranges, negation, '.', and "|" leading a continuation line.
TEST(GbnfParserTest, LlamaCppSyntax) {
  const char* text = R"(root ::= obj   # trailing comment
obj ::=
  "{" ws (
            str ":" ws val
    ("," ws str ":" ws val)*
  )? "}"
val ::= str | num | "x"{2} | "y"{1,3} | "z"{2,} | . | [\x20\x21\x23-\x5b\x5d-\U0010FFFF]
str ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
num ::= "-"? [0-9]+
  | "nan"
ws ::= | " " | "\n" [ \t]{0,20}
)";
  absl::StatusOr<Grammar> g = ParseGbnf(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(GbnfMatches(*g, R"({"a": -12, "b":xx, "c": yyy,"d":zzzz,"e":"\u00FF"})"));
  EXPECT_TRUE(GbnfMatches(*g, "{\"a\":nan,\"b\":\xE2\x82\xAC}"));
  EXPECT_FALSE(GbnfMatches(*g, R"({"a": xxx})"));
  EXPECT_FALSE(GbnfMatches(*g, R"({"a": yyyy})"));
}

TEST(GbnfParserTest, PrintedGrammarParsesBackIdentically) {
  for (const char* name : {"json.gbnf", "arithmetic.gbnf", "list.gbnf"}) {
    Grammar g = *ParseGbnf(ReadGrammarFile(name));
    const std::string printed = g.ToGbnf();
    absl::StatusOr<Grammar> again = ParseGbnf(printed);
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
    EXPECT_EQ(again->ToGbnf(), printed);
  }
  // Characters that need escapes inside literals and classes.
  Grammar g = *ParseGbnf("root ::= \"a\\\"b\\\\c\\n\\x01\\u00E9\\U0001F600\" [\\]\\[\\-^a-c\\x00] [^\\x00-\\U0010FFFF]?\n");
  const std::string printed = g.ToGbnf();
  absl::StatusOr<Grammar> again = ParseGbnf(printed);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(again->ToGbnf(), printed);
}

TEST(GbnfParserTest, ErrorsNameLineAndColumn) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"root ::= \"a\"\nfoo ::= bar\n", "line 2, column 9: rule 'bar' is used but never defined"},
      {"rot ::= \"a\"\n", "no rule named 'root'"},
      {"root ::= \"abc\n", "line 1, column 10: unterminated string literal"},
      {"root ::= [ab\n", "line 1, column 10: unterminated character class"},
      {"root ::= (\"a\" \n", "missing ')'"},
      {"root ::= \"a\"{3,2}\n", "line 1, column 13: repetition {3,2}: the maximum is below the minimum"},
      {"root ::= \"a\"{99999}\n", "repetition count above the limit"},
      {"root ::= \"\\q\"\n", "line 1, column 11: unknown escape '\\q'"},
      {"root ::= \"\\uD800\"\n", "not a Unicode scalar value"},
      {"root ::= [z-a]\n", "line 1, column 11: character range is reversed"},
      {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice"},
      {"root ::= <|eot|>\n", "token references"},
      {"root \"a\"\n", "line 1, column 6: expected '::=' after the rule name 'root'"},
      {"root ::= \"a\" )\n", "line 1, column 14: unexpected ')'"},
      {"root ::= \"\xff\"\n", "line 1, column 11: the grammar text is not valid UTF-8"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Grammar> g = ParseGbnf(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(GbnfParserTest, AutomatonRefusesLeftRecursionAndEmptyLanguages) {
  absl::StatusOr<Grammar> g = ParseGbnf("root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]\n");
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::shared_ptr<const Automaton>> a = Automaton::Build(*g);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("left recursion is not supported: expr -> expr"));
  // Through a nullable rule.
  g = ParseGbnf("root ::= a\na ::= b a \"x\" | \"y\"\nb ::= \"\" | \"z\"\n");
  ASSERT_TRUE(g.ok());
  a = Automaton::Build(*g);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("left recursion"));
  g = ParseGbnf("root ::= [^\\x00-\\U0010FFFF]\n");
  ASSERT_TRUE(g.ok());
  a = Automaton::Build(*g);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("matches no text"));
  // Right recursion is fine; so is a rule that can never end when an alternative can.
  g = ParseGbnf("root ::= \"a\" root | \"b\" | loop\nloop ::= \"c\" loop\n");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Automaton::Build(*g).ok());
}

TEST(GbnfParserTest, AutomatonSizeIsBounded) {
  absl::StatusOr<Grammar> g = ParseGbnf("root ::= ((([^a]{2000}){2000}){2000})\n");
  // (The limit is reached after max_nodes states: the cost is bounded by the limit.)
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::shared_ptr<const Automaton>> a = Automaton::Build(*g);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("too large"));
}

TEST(Utf8Test, SequencesEncodeExactlyTheRange) {
  // Every code point of a few ranges, against AppendUtf8, plus the bytes just outside.
  const std::pair<char32_t, char32_t> ranges[] = {{0, 0x7F}, {0x41, 0x5A}, {0x7F, 0x801}, {0xE000, 0x10100},
                                                  {0x20, kSurrogateFirst - 1}, {0xFFFF, 0x10FFFF}};
  for (const auto& [lo, hi] : ranges) {
    std::vector<Utf8Sequence> seqs;
    Utf8Sequences(lo, hi, &seqs);
    auto member = [&](const std::string& s) {
      for (const Utf8Sequence& seq : seqs) {
        if (seq.size() != s.size()) continue;
        bool all = true;
        for (size_t i = 0; i < s.size(); ++i) {
          const auto b = static_cast<uint8_t>(s[i]);
          all = all && seq[i].lo <= b && b <= seq[i].hi;
        }
        if (all) return true;
      }
      return false;
    };
    for (char32_t c = 0; c <= 0x10FFFF; c += (c < 0x20000 ? (testing::kSanitized ? 7 : 1) : 97)) {
      if (c >= kSurrogateFirst && c <= kSurrogateLast) continue;
      std::string s;
      AppendUtf8(c, &s);
      EXPECT_EQ(member(s), c >= lo && c <= hi) << std::hex << static_cast<uint32_t>(c) << " in [" << static_cast<uint32_t>(lo) << ", " << static_cast<uint32_t>(hi) << "]";
    }
  }
}

}  // namespace
}  // namespace kvtier::grammar
