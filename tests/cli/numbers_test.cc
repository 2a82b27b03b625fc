// Tests of the CLI's strict number parsing (tools/kvtier/numbers.h): ranges, overflow,
// malformed text and the messages the flags print.
#include "numbers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvtier::cli {
namespace {

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(ParseIntegerTest, AcceptsDecimalsInRange) {
  EXPECT_EQ(*ParseInteger("0", 0, 10), 0);
  EXPECT_EQ(*ParseInteger("-7", -10, 10), -7);
  EXPECT_EQ(*ParseInteger("2147483647", 1, INT32_MAX), INT32_MAX);
  EXPECT_EQ(*ParseInteger("9223372036854775807", 0, INT64_MAX), INT64_MAX);
}

TEST(ParseIntegerTest, RefusesOutOfRangeAndOverflowWithTheRange) {
  EXPECT_EQ(Message(ParseInteger("4294967297", 1, INT32_MAX).status()),
            "4294967297 is out of range [1, 2147483647]");
  EXPECT_EQ(Message(ParseInteger("9223372036854775808", 0, INT64_MAX).status()),
            "9223372036854775808 is out of range [0, 9223372036854775807]");
  EXPECT_EQ(Message(ParseInteger("-1", 0, 5).status()), "-1 is out of range [0, 5]");
}

TEST(ParseIntegerTest, RefusesWhatIsNotADecimalInteger) {
  for (const char* text : {"", "-", "+5", " 5", "5 ", "0x10", "1e3", "1.0", "5k", "--5"}) {
    EXPECT_EQ(Message(ParseInteger(text, INT64_MIN, INT64_MAX).status()),
              std::string("'") + text + "' is not an integer")
        << text;
  }
}

TEST(ParseRealTest, RangesIncludingAnOpenLowerBound) {
  EXPECT_DOUBLE_EQ(*ParseReal("0.7", 0, 1), 0.7);
  EXPECT_DOUBLE_EQ(*ParseReal("1e-3", 0, 1), 1e-3);
  EXPECT_DOUBLE_EQ(*ParseReal("1", 0, 1, true), 1.0);
  EXPECT_EQ(Message(ParseReal("0", 0, 1, true).status()), "0 is out of range (0, 1]");
  EXPECT_EQ(Message(ParseReal("-1", 0, 1).status()), "-1 is out of range [0, 1]");
  EXPECT_EQ(Message(ParseReal("1e999", 0, 1e6).status()), "1e999 is out of range [0, 1e+06]");
  for (const char* text : {"", "nan", "inf", "0x1p3x", "1,5", "abc", "+1"}) {
    EXPECT_FALSE(ParseReal(text, -1e9, 1e9).ok()) << text;
  }
}

TEST(ParseBytesTest, UnitsAndFractions) {
  EXPECT_EQ(*ParseBytes("4096", 0, INT64_MAX), 4096);
  EXPECT_EQ(*ParseBytes("64MiB", 0, INT64_MAX), 64 << 20);
  EXPECT_EQ(*ParseBytes("1.5GiB", 0, INT64_MAX), int64_t{3} << 29);
  EXPECT_EQ(*ParseBytes("2KB", 0, INT64_MAX), 2000);
  EXPECT_EQ(*ParseBytes("3K", 0, INT64_MAX), 3072);
  EXPECT_EQ(*ParseBytes("7B", 0, INT64_MAX), 7);
  EXPECT_EQ(*ParseBytes("8388607TiB", 0, INT64_MAX), int64_t{8388607} << 40);  // 2^63 - 2^40
}

TEST(ParseBytesTest, OverflowIsOutOfRangeNeverAWrappedValue) {
  for (const char* text : {"8388608TiB", "9999999999TiB", "8589934592GiB", "18446744073709551616",
                           "9223372036854775808", "99999999999999999999999B"}) {
    EXPECT_EQ(Message(ParseBytes(text, 0, INT64_MAX).status()),
              std::string(text) + " is out of range [0, 9223372036854775807]")
        << text;
  }
  EXPECT_EQ(Message(ParseBytes("2KiB", 0, 1024).status()), "2KiB is out of range [0, 1024]");
}

TEST(ParseBytesTest, RefusesMalformedSizes) {
  for (const char* text : {"", "-1", "+1", "1.", ".5", "MiB", "12XB", "1e3", "0x10", "1 MiB", "1.5.2GiB"}) {
    EXPECT_EQ(Message(ParseBytes(text, 0, INT64_MAX).status()),
              std::string("'") + text + "' is not a byte size (e.g. 4096, 64MiB, 1.5GiB)")
        << text;
  }
}

TEST(ParseTokenIdsTest, ListsAndTheirErrors) {
  EXPECT_THAT(*ParseTokenIds("1, 2,3"), ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(Message(ParseTokenIds("1,,2").status()), "'1,,2' has an empty item");
  EXPECT_EQ(Message(ParseTokenIds("").status()), "'' has an empty item");
  EXPECT_EQ(Message(ParseTokenIds("1,-2").status()), "-2 is out of range [0, 2147483647]");
  EXPECT_EQ(Message(ParseTokenIds("x").status()), "'x' is not an integer");
}

}  // namespace
}  // namespace kvtier::cli
