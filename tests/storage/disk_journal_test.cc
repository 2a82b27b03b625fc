#include "storage/disk_journal.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/fake_file_io.h"

namespace kvtier {
namespace {

constexpr const char* kPath = "/j/kv.journal";
constexpr int64_t kJournalSlots = 10;

Sha256Digest JournalKey(uint64_t n) { return Sha256::Of(&n, sizeof n); }

TEST(DiskJournalTest, AppendedRecordsReplayInOrder) {
  FakeFileIo io;
  auto journal = DiskJournal::Open(&io, kPath, 7);
  ASSERT_TRUE(journal.ok()) << journal.status();
  const std::vector<DiskIndexEntry> a = {{1, JournalKey(1)}, {2, JournalKey(2)}};
  const std::vector<DiskIndexEntry> b = {{1, JournalKey(3)}};
  ASSERT_TRUE((*journal)->Append(a).ok());
  ASSERT_TRUE((*journal)->Append(b).ok());
  EXPECT_EQ((*journal)->num_records(), 3);
  auto replay = DecodeJournal(*io.Contents(kPath), 7, kJournalSlots);
  ASSERT_TRUE(replay.ok()) << replay.status();
  const std::vector<DiskIndexEntry> all = {{1, JournalKey(1)}, {2, JournalKey(2)}, {1, JournalKey(3)}};
  EXPECT_EQ(replay->records, all);
  EXPECT_EQ(replay->ignored_bytes, 0);
}

TEST(DiskJournalTest, OtherGenerationIsFailedPreconditionAndCorruptHeaderDataLoss) {
  FakeFileIo io;
  auto journal = DiskJournal::Open(&io, kPath, 7);
  ASSERT_TRUE(journal.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(DecodeJournal(*io.Contents(kPath), 8, kJournalSlots).status()));
  for (size_t n = 0; n < 24; ++n) {
    EXPECT_TRUE(absl::IsDataLoss(DecodeJournal(io.Contents(kPath)->substr(0, n), 7, kJournalSlots).status())) << n;
  }
  ASSERT_TRUE(io.FlipBit(kPath, 3, 1).ok());
  EXPECT_TRUE(absl::IsDataLoss(DecodeJournal(*io.Contents(kPath), 7, kJournalSlots).status()));
}

TEST(DiskJournalTest, RestartedJournalNeverReplaysOlderRecords) {
  // The file is rewritten in place: after a restart, the records of the earlier generation
  // past the new end fail their CRC (it covers the generation) and end the replay.
  FakeFileIo io;
  auto journal = DiskJournal::Open(&io, kPath, 1);
  ASSERT_TRUE(journal.ok());
  const std::vector<DiskIndexEntry> old = {{1, JournalKey(1)}, {2, JournalKey(2)}, {3, JournalKey(3)}};
  ASSERT_TRUE((*journal)->Append(old).ok());
  ASSERT_TRUE((*journal)->Restart(2).ok());
  const std::vector<DiskIndexEntry> fresh = {{4, JournalKey(4)}};
  ASSERT_TRUE((*journal)->Append(fresh).ok());
  auto replay = DecodeJournal(*io.Contents(kPath), 2, kJournalSlots);
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->records, fresh);
  EXPECT_EQ(replay->ignored_bytes, 2 * 44);
}

TEST(DiskJournalTest, TornOrCorruptRecordsEndTheReplay) {
  FakeFileIo io;
  auto journal = DiskJournal::Open(&io, kPath, 5);
  ASSERT_TRUE(journal.ok());
  const std::vector<DiskIndexEntry> records = {{1, JournalKey(1)}, {2, JournalKey(2)}, {3, JournalKey(3)}};
  ASSERT_TRUE((*journal)->Append(records).ok());
  const std::string bytes = *io.Contents(kPath);
  for (size_t cut = 24; cut < bytes.size(); ++cut) {
    auto replay = DecodeJournal(bytes.substr(0, cut), 5, kJournalSlots);
    ASSERT_TRUE(replay.ok());
    EXPECT_EQ(replay->records.size(), (cut - 24) / 44) << cut;
  }
  for (size_t i = 24; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    auto replay = DecodeJournal(bad, 5, kJournalSlots);
    ASSERT_TRUE(replay.ok());
    EXPECT_EQ(replay->records.size(), (i - 24) / 44) << i;
  }
  // A record naming a slot past the store's end (written for a larger store) ends it too.
  auto replay = DecodeJournal(bytes, 5, 2);
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->records.size(), 1u);
}

TEST(DiskJournalTest, FailedAppendIsIoError) {
  FakeFileIo io;
  auto journal = DiskJournal::Open(&io, kPath, 5);
  ASSERT_TRUE(journal.ok());
  const std::vector<DiskIndexEntry> records = {{1, JournalKey(1)}};
  io.FailNextSyncs(1);
  EXPECT_FALSE((*journal)->Append(records).ok());
  EXPECT_EQ((*journal)->num_records(), 0);
  ASSERT_TRUE((*journal)->Append(records).ok());
}

}  // namespace
}  // namespace kvtier
