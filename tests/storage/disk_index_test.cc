#include "storage/disk_index.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/coding.h"

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

Sha256Digest IndexKey(uint64_t n) { return Sha256::Of(&n, sizeof n); }

DiskIndexSnapshot Snapshot() {
  DiskIndexSnapshot s;
  s.journal_generation = 0x0123456789ABCDEFull;
  s.entries = {{0, IndexKey(1)}, {7, IndexKey(2)}, {3, Sha256Digest{}}};
  return s;
}

TEST(DiskIndexTest, RoundTrip) {
  const std::string bytes = EncodeDiskIndex(Geometry(), Snapshot());
  auto decoded = DecodeDiskIndex(bytes, Geometry());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->entries, Snapshot().entries);
  EXPECT_EQ(decoded->journal_generation, Snapshot().journal_generation);
  auto empty = DecodeDiskIndex(EncodeDiskIndex(Geometry(), {}), Geometry());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->entries.empty());
}

TEST(DiskIndexTest, ForeignGeometryOrModelIsFailedPrecondition) {
  const std::string bytes = EncodeDiskIndex(Geometry(), Snapshot());
  for (int field = 0; field < 4; ++field) {
    DiskGeometry other = Geometry();
    if (field == 0) other.num_slots = 9;
    if (field == 1) other.block_bytes = 1001;
    if (field == 2) other.block_tokens = 32;
    if (field == 3) other.model_fingerprint ^= 1;
    EXPECT_TRUE(absl::IsFailedPrecondition(DecodeDiskIndex(bytes, other).status())) << field;
  }
}

TEST(DiskIndexTest, OlderVersionIsRecognised) {
  // Version 1 (64-bit hashes): its own layout, recognised by magic and version alone.
  std::string v1(80, '\0');
  auto* p = reinterpret_cast<uint8_t*>(v1.data());
  coding::PutFixed32(p, 0x4954564Bu);
  coding::PutFixed32(p + 4, 1);
  absl::Status s = DecodeDiskIndex(v1, Geometry()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("older"), std::string::npos) << s;
}

TEST(DiskIndexTest, EveryTruncationAndBitFlipIsRefused) {
  const std::string bytes = EncodeDiskIndex(Geometry(), Snapshot());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeDiskIndex(bytes.substr(0, n), Geometry()).ok()) << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::Status s = DecodeDiskIndex(bad, Geometry()).status();
      // DataLoss, except the version field turned older (recognised, still refused).
      EXPECT_TRUE(absl::IsDataLoss(s) || (i >= 4 && i < 8 && absl::IsFailedPrecondition(s))) << i << ":" << bit << " " << s;
    }
  }
  EXPECT_TRUE(absl::IsDataLoss(DecodeDiskIndex(bytes + "x", Geometry()).status()));
}

TEST(DiskIndexTest, ValidationRejectsBadEntries) {
  EXPECT_TRUE(ValidateDiskIndexEntries(Geometry(), Snapshot().entries).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{8, IndexKey(1)}})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{-1, IndexKey(1)}})));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateDiskIndexEntries(Geometry(), {{1, IndexKey(1)}, {1, IndexKey(2)}})));
  // A well-formed, correctly checksummed index with a bad entry is still refused on decode.
  DiskIndexSnapshot bad;
  bad.entries = {{9, IndexKey(1)}};
  EXPECT_TRUE(absl::IsDataLoss(DecodeDiskIndex(EncodeDiskIndex(Geometry(), bad), Geometry()).status()));
}

}  // namespace
}  // namespace kvtier
