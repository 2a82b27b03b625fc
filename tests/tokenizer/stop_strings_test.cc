// StopStringMatcher: stops across piece boundaries, releases text that cannot start a stop
// string, and emits exactly the text before the stop.
#include "tokenizer/stop_strings.h"

#include "gtest/gtest.h"

namespace kvtier::tokenizer {
namespace {

TEST(StopStringMatcherTest, MatchesAcrossPieces) {
  StopStringMatcher m({"STOP", "\n\nUser:"});
  std::string out;
  for (std::string_view piece : {"Hello", " wor", "ld S", "TO", "P and more"}) {
    auto r = m.Add(piece);
    out += r.text;
    if (r.stop_index) {
      EXPECT_EQ(*r.stop_index, 0u);
      break;
    }
  }
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello world ");
  EXPECT_EQ(m.Add("x").text, "");
}

TEST(StopStringMatcherTest, HoldsOnlyAPossibleStart) {
  StopStringMatcher m({"\n\nUser:"});
  auto r = m.Add("abc\n");
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(m.held_bytes(), 1u);
  r = m.Add("\nUse");
  EXPECT_EQ(r.text, "");
  r = m.Add("d it");  // "\n\nUsed it": not the stop string after all
  EXPECT_EQ(r.text, "\n\nUsed it");
  EXPECT_FALSE(r.stop_index.has_value());
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopStringMatcherTest, EarliestStopWinsAndFlushReleasesTheRest) {
  StopStringMatcher m({"cd", "bcd", "ab"});
  auto r = m.Add("xxabcd");
  ASSERT_TRUE(r.stop_index.has_value());
  EXPECT_EQ(*r.stop_index, 2u);
  EXPECT_EQ(r.text, "xx");

  StopStringMatcher n({"</answer>"});
  EXPECT_EQ(n.Add("done </ans").text, "done ");
  EXPECT_EQ(n.Flush(), "</ans");
}

TEST(StopStringMatcherTest, MultibyteStopStrings) {
  StopStringMatcher m({"。\n"});
  std::string out;
  out += m.Add("你好").text;
  out += m.Add("。").text;
  EXPECT_EQ(out, "你好");
  auto r = m.Add("\n再见");
  EXPECT_TRUE(r.stop_index.has_value());
  EXPECT_EQ(r.text, "");
}

}  // namespace
}  // namespace kvtier::tokenizer
