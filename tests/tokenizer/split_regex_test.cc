// SplitRegex: the hand-written matchers agree with ICU's engine (with JavaScript's \s) on
// the whole corpus, and split known cases as the reference does.
#include "tokenizer/split_regex.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer_test_util.h"

namespace kvtier::tokenizer {
namespace {

constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> Split(const SplitRegex& regex, std::string_view text) {
  std::vector<SplitRegex::Match> matches;
  regex.FindAll(text, &matches);
  std::vector<std::string> out;
  for (auto [b, e] : matches) out.emplace_back(text.substr(b, e - b));
  return out;
}

TEST(SplitRegexTest, KnownPatternsUseTheFastMatcher) {
  for (std::string_view p : {std::string_view(kLlama3), std::string_view(kQwen2), kGpt2Pattern}) {
    auto regex = SplitRegex::Create(p);
    ASSERT_TRUE(regex.ok()) << regex.status();
    EXPECT_TRUE((*regex)->is_fast());
  }
  auto other = SplitRegex::Create(R"(\d+|[a-z]+)");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE((*other)->is_fast());
}

TEST(SplitRegexTest, FastMatchersAgreeWithIcuOnCorpus) {
  std::vector<std::string> corpus = testing::ReadCorpus();
  ASSERT_GE(corpus.size(), 2000u);
  for (std::string_view p : {std::string_view(kLlama3), std::string_view(kQwen2), kGpt2Pattern}) {
    auto fast = SplitRegex::Create(p);
    auto icu = SplitRegex::CreateIcu(p);
    ASSERT_TRUE(fast.ok() && icu.ok());
    int mismatches = 0;
    for (const std::string& line : corpus) {
      std::vector<SplitRegex::Match> a, b;
      (*fast)->FindAll(line, &a);
      (*icu)->FindAll(line, &b);
      if (a != b && ++mismatches <= 3) ADD_FAILURE() << "pattern " << p << " differs on: " << line;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(SplitRegexTest, Llama3Splits) {
  auto regex = SplitRegex::Create(kLlama3);
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(Split(**regex, "I'M here 12345 ok"),
            (std::vector<std::string>{"I", "'M", " here", " ", "123", "45", " ok"}));
  EXPECT_EQ(Split(**regex, "a  b\n\n c"), (std::vector<std::string>{"a", " ", " b", "\n\n", " c"}));
  EXPECT_EQ(Split(**regex, "x !!\n\ny   "), (std::vector<std::string>{"x", " !!\n\n", "y", "   "}));
}

TEST(SplitRegexTest, Gpt2Splits) {
  auto regex = SplitRegex::Create(kGpt2Pattern);
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(Split(**regex, "it's 2024, ok"),
            (std::vector<std::string>{"it", "'s", " 2024", ",", " ok"}));
}

TEST(SplitRegexTest, BadRegexIsInvalidArgument) {
  auto regex = SplitRegex::Create("(unclosed");
  EXPECT_EQ(regex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(regex.status().message().find("pattern"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::tokenizer
