#include "storage/crc32c.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier::crc32c {
namespace {

uint32_t Of(const std::string& s) { return Value(s.data(), s.size()); }

TEST(Crc32cTest, CheckValue) {
  EXPECT_EQ(Of("123456789"), 0xE3069283u);
  EXPECT_EQ(ExtendPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Value("", 0), 0u);
}

// RFC 3720 appendix B.4.
TEST(Crc32cTest, Rfc3720Vectors) {
  uint8_t buf[32];
  std::memset(buf, 0, sizeof(buf));
  EXPECT_EQ(Value(buf, sizeof(buf)), 0x8A9136AAu);
  std::memset(buf, 0xFF, sizeof(buf));
  EXPECT_EQ(Value(buf, sizeof(buf)), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Value(buf, sizeof(buf)), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Value(buf, sizeof(buf)), 0x113FDB5Cu);
  const uint8_t iscsi_read[48] = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  };
  EXPECT_EQ(Value(iscsi_read, sizeof(iscsi_read)), 0xD9963A56u);
  EXPECT_EQ(ExtendPortable(0, iscsi_read, sizeof(iscsi_read)), 0xD9963A56u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  EXPECT_EQ(Of("hello world"), Extend(Of("hello "), "world", 5));
  EXPECT_NE(Of("a"), Of("foo"));
}

// Every length and alignment up to a few words: hardware path == table path, and extending
// piecewise == one pass.
TEST(Crc32cTest, HardwareMatchesPortableAtAllAlignments) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(300);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; start + n <= data.size(); n += 1 + n / 16) {
      const uint32_t expect = ExtendPortable(0, data.data() + start, n);
      ASSERT_EQ(Value(data.data() + start, n), expect) << start << " " << n;
      const size_t half = n / 3;
      ASSERT_EQ(Extend(Extend(0, data.data() + start, half), data.data() + start + half,
                       n - half),
                expect);
    }
  }
  // A single-bit change always changes the CRC.
  const uint32_t base = Value(data.data(), data.size());
  data[123] ^= 0x10;
  EXPECT_NE(Value(data.data(), data.size()), base);
  RecordProperty("hardware", HardwareAccelerated() ? "sse4.2" : "table");
}

}  // namespace
}  // namespace kvtier::crc32c
