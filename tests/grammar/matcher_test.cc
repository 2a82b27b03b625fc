// Matcher and TokenIndex against the independent Earley oracle: along random walks through
// each grammar (random allowed tokens, multi-byte and partial-UTF-8 tokens included), the
// mask must allow exactly the tokens whose bytes keep the text a viable prefix, and the end
// token exactly when the text is complete.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "gmock/gmock.h"
#include "grammar/compiled_grammar.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"
#include "gtest/gtest.h"

namespace kvtier::grammar {
namespace {

using testing::EarleyOracle;
using testing::kTestEos;
using testing::TestVocabulary;

std::string ReadGrammar(const std::string& name) {
  std::ifstream in(std::filesystem::path(KVTIER_SOURCE_DIR) / "tests/grammar/grammars" / name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Bit(const std::vector<uint32_t>& words, int32_t id) { return (words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u; }

// Walks `walks` random paths of up to max_steps tokens, checking every mask against the
// oracle. Returns how many walks ended complete.
int CheckAgainstOracle(const std::string& gbnf, int walks, int max_steps, uint64_t seed) {
  absl::StatusOr<Grammar> g = ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return 0;
  auto vocab = TestVocabulary(300, seed);
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> compiled = CompiledGrammar::Compile(*g, vocab);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return 0;
  EarleyOracle oracle(*g);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->num_words()));
  int completed = 0;
  for (int w = 0; w < walks; ++w) {
    Matcher m(*compiled, {kTestEos});
    oracle.Reset();
    std::string text;
    for (int step = 0; step < max_steps; ++step) {
      m.FillMask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        bool expected = false;
        if (id == kTestEos) {
          expected = oracle.Complete();
        } else if (vocab->is_text(id)) {
          expected = oracle.Viable(vocab->bytes(id));
        }
        EXPECT_EQ(Bit(mask, id), expected) << "token " << id << " '" << vocab->bytes(id) << "' after '" << text << "'";
        if (Bit(mask, id) != expected) return completed;
        if (expected) allowed.push_back(id);
      }
      EXPECT_EQ(m.accepting(), oracle.Complete());
      if (allowed.empty()) {
        ADD_FAILURE() << "no token allowed after '" << text << "'";
        return completed;
      }
      // Prefer ending now and then, so walks finish.
      int32_t pick = allowed[rng() % allowed.size()];
      if (m.accepting() && rng() % 4 == 0) pick = kTestEos;
      EXPECT_TRUE(m.AcceptToken(pick));
      if (pick == kTestEos) {
        EXPECT_TRUE(m.terminated());
        ++completed;
        break;
      }
      text += vocab->bytes(pick);
      EXPECT_TRUE(oracle.Append(vocab->bytes(pick)));
      if (m.terminated()) {
        EXPECT_TRUE(oracle.Complete());
        ++completed;
        break;
      }
    }
  }
  return completed;
}

TEST(MatcherTest, GrammarFilesAgreeWithOracle) {
  for (const char* name : {"json.gbnf", "arithmetic.gbnf", "list.gbnf"}) {
    SCOPED_TRACE(name);
    const int completed = CheckAgainstOracle(ReadGrammar(name), testing::kSanitized ? 2 : 6, testing::kSanitized ? 25 : 60, 11);
    EXPECT_GE(completed, 0);
  }
}

TEST(MatcherTest, TrickyGrammarsAgreeWithOracle) {
  const char* grammars[] = {
      // Ambiguity: several parses of the same bytes.
      "root ::= (\"a\" | \"ab\")* \"b\"? \"c\"\n",
      // Nullable rules, nested repetition, rule ends mid-token.
      "root ::= x y x\nx ::= \"\" | [0-9]+\ny ::= (\",\" | \" \")?\n",
      // Right recursion and deep calls.
      "root ::= \"(\" root \")\" | \"x\"\n",
      // Unicode classes split inside multi-byte tokens.
      "root ::= [\\u00E0-\\u00FF\\u20AC\\U0001F600]{1,4} \"!\"\n",
      // Literal choices sharing prefixes, optional trailing part.
      "root ::= (\"true\" | \"tr\" | \"t\") (\" \" | \"\")\n",
      // Bounded repetition of a call.
      "root ::= item{2,3}\nitem ::= \"{\" [a-c]? \"}\"\n",
      // Any character.
      "root ::= . . \"x\"\n",
  };
  uint64_t seed = 1;
  for (const char* g : grammars) {
    SCOPED_TRACE(g);
    CheckAgainstOracle(g, testing::kSanitized ? 3 : 8, testing::kSanitized ? 20 : 40, seed++);
  }
}

TEST(MatcherTest, RejectsWhatTheMaskForbids) {
  Grammar g = *ParseGbnf("root ::= \"ab\"\n");
  auto vocab = TestVocabulary(0, 1);
  auto compiled = *CompiledGrammar::Compile(g, vocab);
  Matcher m(compiled, {kTestEos});
  EXPECT_FALSE(m.AcceptToken('b'));
  EXPECT_FALSE(m.AcceptToken(kTestEos));
  EXPECT_FALSE(m.AcceptToken(vocab->size() - 1));  // no text
  EXPECT_TRUE(m.AcceptToken('a'));
  EXPECT_FALSE(m.accepting());
  EXPECT_TRUE(m.AcceptToken('b'));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.terminated());  // nothing can follow "ab"
  EXPECT_FALSE(m.AcceptToken('b'));
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->num_words()));
  m.FillMask(mask);
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
}

TEST(MatcherTest, AmbiguityOverflowAllowsNothingAndSaysWhy) {
  // Every "a" doubles the parse positions of this grammar.
  Grammar g = *ParseGbnf("root ::= x*\nx ::= \"a\" | \"a\" | \"aa\" | y\ny ::= \"a\"\n");
  auto vocab = TestVocabulary(0, 1);
  auto compiled = *CompiledGrammar::Compile(g, vocab);
  Matcher m(compiled, {kTestEos}, /*max_stacks=*/4);
  int accepted = 0;
  while (m.status().ok() && accepted < 100) accepted += m.AcceptToken('a') ? 1 : 100;
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->num_words()));
  m.FillMask(mask);
  if (!m.status().ok()) {
    EXPECT_THAT(std::string(m.status().message()), ::testing::HasSubstr("too ambiguous"));
    for (uint32_t w : mask) EXPECT_EQ(w, 0u);
  }
}

TEST(MatcherTest, CacheCompilesOncePerGrammarAndVocabulary) {
  GrammarCache cache(2);
  auto vocab = TestVocabulary(10, 1);
  Grammar a = *ParseGbnf("root ::= \"a\"\n");
  Grammar a2 = *ParseGbnf("root   ::=   \"a\"   # same grammar, other spelling\n");
  Grammar b = *ParseGbnf("root ::= \"b\"\n");
  auto first = cache.Get(a, vocab);
  ASSERT_TRUE(first.ok());
  auto second = cache.Get(a2, vocab);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(cache.counters().compiles, 1);
  EXPECT_EQ(cache.counters().hits, 1);
  auto other_vocab = TestVocabulary(10, 2);
  EXPECT_NE(cache.Get(a, other_vocab)->get(), first->get());
  ASSERT_TRUE(cache.Get(b, vocab).ok());
  EXPECT_EQ(cache.counters().entries, 2);  // capacity 2: the least recently used went
  Grammar bad = *ParseGbnf("root ::= x\nx ::= x \"a\"\n");
  auto failed = cache.Get(bad, vocab);
  EXPECT_FALSE(failed.ok());
  EXPECT_FALSE(cache.Get(bad, vocab).ok());
}

}  // namespace
}  // namespace kvtier::grammar
