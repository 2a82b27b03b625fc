#include "storage/disk_index.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

DiskGeometry Geometry() {
  DiskGeometry g;
  g.num_slots = 8;
  g.block_bytes = 1000;
  g.block_tokens = 16;
  g.model_fingerprint = 0xABCDEF0123456789ull;
  return g;
}

const std::vector<DiskIndexEntry> kEntries = {
    {0, 0xFFFFFFFFFFFFFFFFull, 16}, {7, 42, 3}, {3, 0, 0}};

TEST(DiskIndexTest, RoundTrip) {
  const std::string bytes = EncodeDiskIndex(Geometry(), kEntries);
  auto decoded = DecodeDiskIndex(bytes, Geometry());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, kEntries);
  auto empty = DecodeDiskIndex(EncodeDiskIndex(Geometry(), {}), Geometry());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(DiskIndexTest, ForeignGeometryOrModelIsFailedPrecondition) {
  const std::string bytes = EncodeDiskIndex(Geometry(), kEntries);
  for (int field = 0; field < 4; ++field) {
    DiskGeometry other = Geometry();
    if (field == 0) other.num_slots = 9;
    if (field == 1) other.block_bytes = 1001;
    if (field == 2) other.block_tokens = 32;
    if (field == 3) other.model_fingerprint ^= 1;
    EXPECT_TRUE(absl::IsFailedPrecondition(DecodeDiskIndex(bytes, other).status())) << field;
  }
}

TEST(DiskIndexTest, EveryTruncationAndBitFlipIsDataLoss) {
  const std::string bytes = EncodeDiskIndex(Geometry(), kEntries);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_TRUE(absl::IsDataLoss(DecodeDiskIndex(bytes.substr(0, n), Geometry()).status())) << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::Status s = DecodeDiskIndex(bad, Geometry()).status();
      EXPECT_TRUE(absl::IsDataLoss(s)) << i << ":" << bit << " " << s;
    }
  }
  EXPECT_TRUE(absl::IsDataLoss(DecodeDiskIndex(bytes + "x", Geometry()).status()));
}

TEST(DiskIndexTest, ValidationRejectsBadEntries) {
  EXPECT_TRUE(ValidateDiskIndexEntries(Geometry(), kEntries).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{8, 1, 1}})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{-1, 1, 1}})));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{1, 1, 1}, {1, 2, 1}})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{1, 1, 17}})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{1, 1, -1}})));
  // A well-formed, correctly checksummed index with a bad entry is still refused on decode.
  const std::string bytes = EncodeDiskIndex(Geometry(), {{1, 1, 17}});
  EXPECT_TRUE(absl::IsDataLoss(DecodeDiskIndex(bytes, Geometry()).status()));
}

}  // namespace
}  // namespace kvtier
