#include "storage/disk_block_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/errors.h"
#include "storage/coding.h"
#include "storage/crc32c.h"
#include "testing/fake_file_io.h"
#include "temp_dir.h"

namespace kvtier {
namespace {

using ::kvtier::testing::StorageTempDir;
using Content = DiskBlockStore::Content;

constexpr size_t kBlockBytes = 5000;  // not a multiple of 4096: slots pad to 8192
constexpr int64_t kSlots = 6;
constexpr int64_t kBlockTokens = 16;
constexpr uint64_t kFingerprint = 0x1234567890ABCDEFull;

std::vector<uint8_t> Block(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(kBlockBytes);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

Sha256Digest Key(uint64_t n) { return Sha256::Of(&n, sizeof n); }

std::vector<int32_t> Tokens(int32_t seed, size_t n = kBlockTokens) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = seed * 1000 + static_cast<int32_t>(i);
  return t;
}

DiskStoreOptions Options(const std::string& path, FileIo* io) {
  DiskStoreOptions o;
  o.path = path;
  o.num_slots = kSlots;
  o.block_bytes = kBlockBytes;
  o.model_fingerprint = kFingerprint;
  o.block_tokens = kBlockTokens;
  o.io = io;
  return o;
}

std::unique_ptr<DiskBlockStore> OpenOrDie(const DiskStoreOptions& o) {
  auto store = DiskBlockStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Writes block `n` (key n, tokens n, bytes n) into `slot` as cached content.
absl::Status WriteBlock(DiskBlockStore& store, int64_t slot, uint32_t n, Content content = Content::kCached) {
  return store.Write(slot, Key(n), Tokens(static_cast<int32_t>(n)), Block(n).data(), content);
}

absl::Status ReadBlock(DiskBlockStore& store, int64_t slot, uint32_t n, std::vector<uint8_t>* out) {
  out->resize(kBlockBytes);
  return store.Read(slot, Key(n), Tokens(static_cast<int32_t>(n)), out->data());
}

std::vector<DiskIndexEntry> Entries(std::initializer_list<std::pair<int64_t, uint32_t>> slots_and_blocks) {
  std::vector<DiskIndexEntry> entries;
  for (const auto& [slot, n] : slots_and_blocks) entries.push_back({slot, Key(n)});
  return entries;
}

// --- Behaviour common to the real file system and the fake.

class DiskBlockStoreTest : public ::testing::TestWithParam<bool> {
 protected:
  bool fake() const { return GetParam(); }
  FileIo* io() { return fake() ? static_cast<FileIo*>(&fake_io_) : DefaultFileIo(); }
  std::string path() const { return fake() ? "/fake/kv.slots" : dir_.File("kv.slots"); }
  DiskStoreOptions options() { return Options(path(), io()); }

  StorageTempDir dir_;
  FakeFileIo fake_io_;
};

TEST_P(DiskBlockStoreTest, GeometryAndPreallocation) {
  auto store = OpenOrDie(options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_slots(), kSlots);
  EXPECT_EQ(store->header_bytes(), 192u);  // 80 + 16 tokens x 4 + CRC, rounded to 64
  EXPECT_EQ(store->slot_bytes(), 8192);
  EXPECT_EQ(store->slot_bytes() % DiskBlockStore::kSlotAlignment, 0);
  EXPECT_TRUE(store->recovered_entries().empty());
  EXPECT_EQ(store->counters().index_ignored, 0);
  // Opening wrote a snapshot and started the journal.
  EXPECT_TRUE(io()->Exists(store->index_path()));
  EXPECT_TRUE(io()->Exists(store->journal_path()));
  // The store holds the file locked; closed, the file keeps its preallocated size.
  EXPECT_TRUE(absl::IsUnavailable(io()->OpenForReadWrite(path(), 0).status()));
  store.reset();
  auto file = io()->OpenForReadWrite(path(), 0);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*(*file)->Size(), kSlots * 8192);
}

TEST_P(DiskBlockStoreTest, WriteReadRoundTrip) {
  auto store = OpenOrDie(options());
  ASSERT_NE(store, nullptr);
  for (int64_t slot = 0; slot < kSlots; ++slot) {
    ASSERT_TRUE(WriteBlock(*store, slot, static_cast<uint32_t>(100 + slot)).ok());
  }
  std::vector<uint8_t> out;
  for (int64_t slot = kSlots - 1; slot >= 0; --slot) {
    ASSERT_TRUE(ReadBlock(*store, slot, static_cast<uint32_t>(100 + slot), &out).ok()) << slot;
    EXPECT_EQ(out, Block(static_cast<uint32_t>(100 + slot)));
  }
  // Overwriting a slot replaces its block; the old key finds another block there (stale).
  ASSERT_TRUE(WriteBlock(*store, 2, 999).ok());
  ASSERT_TRUE(ReadBlock(*store, 2, 999, &out).ok());
  EXPECT_EQ(out, Block(999));
  absl::Status stale = ReadBlock(*store, 2, 102, &out);
  EXPECT_TRUE(absl::IsNotFound(stale)) << stale;
  EXPECT_NE(stale.message().find("slot 2"), std::string::npos) << stale;
  const DiskBlockStore::Counters c = store->counters();
  EXPECT_EQ(c.writes, kSlots + 1);
  EXPECT_EQ(c.reads, kSlots + 1);
  EXPECT_EQ(c.bytes_written, (kSlots + 1) * static_cast<int64_t>(kBlockBytes));
  EXPECT_EQ(c.bytes_read, c.bytes_written);
  EXPECT_EQ(c.stale_detected, 1);
  EXPECT_EQ(c.corrupt_detected, 0);
  EXPECT_EQ(c.journal_records, kSlots + 1);
  EXPECT_EQ(c.io_errors, 0);
}

TEST_P(DiskBlockStoreTest, EmptySlotIsDataLoss) {
  auto store = OpenOrDie(options());
  std::vector<uint8_t> out;
  absl::Status empty = ReadBlock(*store, 3, 7, &out);
  EXPECT_TRUE(absl::IsDataLoss(empty)) << empty;
  EXPECT_NE(empty.message().find("slot 3"), std::string::npos) << empty;
  EXPECT_EQ(store->counters().corrupt_detected, 1);
}

TEST_P(DiskBlockStoreTest, SameKeyWithOtherTokensIsRefused) {
  auto store = OpenOrDie(options());
  ASSERT_TRUE(WriteBlock(*store, 1, 5).ok());
  std::vector<uint8_t> out(kBlockBytes);
  std::vector<int32_t> other = Tokens(5);
  other[kBlockTokens - 1] += 1;
  absl::Status s = store->Read(1, Key(5), other, out.data());
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("other tokens"), std::string::npos) << s;
  // Fewer tokens (a prefix of them) are other tokens too.
  EXPECT_TRUE(absl::IsFailedPrecondition(store->Read(1, Key(5), Tokens(5, 15), out.data())));
  EXPECT_EQ(store->counters().token_mismatches, 2);
  EXPECT_EQ(store->counters().reads, 0);
  ASSERT_TRUE(ReadBlock(*store, 1, 5, &out).ok());
}

TEST_P(DiskBlockStoreTest, BadArguments) {
  auto store = OpenOrDie(options());
  const auto block = Block(1);
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(kSlots, Key(1), Tokens(1), block.data(), Content::kCached)));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(-1, Key(1), Tokens(1), block.data(), Content::kCached)));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(0, Key(1), Tokens(1, 17), block.data(), Content::kCached)));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(0, Key(1), Tokens(1), nullptr, Content::kCached)));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Read(kSlots, Key(1), Tokens(1), out.data())));
  for (auto change : {+[](DiskStoreOptions& o) { o.num_slots = 0; }, +[](DiskStoreOptions& o) { o.block_bytes = 0; },
                      +[](DiskStoreOptions& o) { o.path.clear(); }, +[](DiskStoreOptions& o) { o.block_tokens = 0; }}) {
    DiskStoreOptions o = options();
    change(o);
    EXPECT_TRUE(absl::IsInvalidArgument(DiskBlockStore::Open(o).status()));
  }
}

TEST_P(DiskBlockStoreTest, RestartFindsEveryJournaledBlock) {
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(WriteBlock(*store, 4, 0xAAAA).ok());
    ASSERT_TRUE(WriteBlock(*store, 1, 0xBBBB).ok());
    ASSERT_TRUE(WriteBlock(*store, 4, 0xCCCC).ok());  // the later record of a slot wins
    // No snapshot after the writes: the journal alone records them (as after a crash).
    EXPECT_EQ(store->counters().compactions, 1);  // the one at open
  }
  auto store = OpenOrDie(options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovered_entries(), Entries({{1, 0xBBBB}, {4, 0xCCCC}}));
  EXPECT_EQ(store->counters().journal_replayed, 3);
  EXPECT_EQ(store->counters().index_ignored, 0);
  EXPECT_EQ(store->counters().slots_scanned, 0);
  std::vector<uint8_t> out;
  ASSERT_TRUE(ReadBlock(*store, 4, 0xCCCC, &out).ok());
  EXPECT_EQ(out, Block(0xCCCC));
  ASSERT_TRUE(ReadBlock(*store, 1, 0xBBBB, &out).ok());
  EXPECT_EQ(out, Block(0xBBBB));
  // The open compacted: the next open reads the snapshot, with nothing left to replay.
  store.reset();
  store = OpenOrDie(options());
  EXPECT_EQ(store->recovered_entries().size(), 2u);
  EXPECT_EQ(store->counters().journal_replayed, 0);
}

TEST_P(DiskBlockStoreTest, PrivateWritesAndForgottenSlotsLeaveTheIndex) {
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(WriteBlock(*store, 0, 1).ok());
    ASSERT_TRUE(WriteBlock(*store, 1, 2).ok());
    ASSERT_TRUE(WriteBlock(*store, 2, 3).ok());
    ASSERT_TRUE(WriteBlock(*store, 0, 4, Content::kPrivate).ok());  // a swapped block over block 1
    store->Forget(1);
    ASSERT_TRUE(store->Compact().ok());
  }
  auto store = OpenOrDie(options());
  EXPECT_EQ(store->recovered_entries(), Entries({{2, 3}}));
}

TEST_P(DiskBlockStoreTest, OtherModelOrGeometryIgnoresEntries) {
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(WriteBlock(*store, 0, 11).ok());
  }
  std::vector<uint8_t> out;
  {  // Another model: its index is ignored, and its slot is never taken for data.
    DiskStoreOptions o = options();
    o.model_fingerprint = kFingerprint + 1;
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->recovered_entries().empty());
    EXPECT_EQ(store->counters().index_ignored, 1);
    EXPECT_EQ(store->counters().slots_scanned, 0);
    EXPECT_NE(store->index_ignored_reason().find("fingerprint"), std::string::npos);
    EXPECT_TRUE(absl::IsDataLoss(ReadBlock(*store, 0, 11, &out)));
  }
  // That open wrote its own (empty) index: the original model's blocks are gone from it,
  // but never misread. Its slot is rewritten to check that geometry changes are refused too.
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(WriteBlock(*store, 0, 11).ok());
  }
  {  // Another block size.
    DiskStoreOptions o = options();
    o.block_bytes = kBlockBytes + 8;
    auto store = OpenOrDie(o);
    EXPECT_TRUE(store->recovered_entries().empty());
    EXPECT_EQ(store->counters().index_ignored, 1);
    std::vector<uint8_t> wide(o.block_bytes);
    EXPECT_TRUE(absl::IsDataLoss(store->Read(0, Key(11), Tokens(11), wide.data())));
  }
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(WriteBlock(*store, 0, 11).ok());
  }
  {  // Another slot count.
    DiskStoreOptions o = options();
    o.num_slots = kSlots + 1;
    EXPECT_TRUE(OpenOrDie(o)->recovered_entries().empty());
  }
}

TEST_P(DiskBlockStoreTest, LostOrCorruptIndexIsRebuiltFromSlotHeaders) {
  std::string good;
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(WriteBlock(*store, 2, 5).ok());
    ASSERT_TRUE(WriteBlock(*store, 4, 6).ok());
    // A swapped block (no tokens): not a cached block.
    ASSERT_TRUE(store->Write(5, Key(7), {}, Block(7).data(), Content::kPrivate).ok());
    ASSERT_TRUE(store->Compact().ok());
    good = *io()->ReadWholeFile(store->index_path());
  }
  std::mt19937 rng(3);
  std::string random_bytes(200, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng());
  std::string bad_crc = good;
  bad_crc.back() = static_cast<char>(bad_crc.back() ^ 1);
  const std::vector<std::string> corrupt = {good.substr(0, good.size() / 2), "", random_bytes, bad_crc};
  for (const std::string& contents : corrupt) {
    ASSERT_TRUE(io()->WriteFileAtomically(path() + ".index", contents).ok());
    auto store = OpenOrDie(options());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->recovered_entries(), Entries({{2, 5}, {4, 6}}));
    EXPECT_EQ(store->counters().index_ignored, 1);
    EXPECT_EQ(store->counters().slots_scanned, kSlots);
    EXPECT_FALSE(store->index_ignored_reason().empty());
    std::vector<uint8_t> out;
    ASSERT_TRUE(ReadBlock(*store, 2, 5, &out).ok());
  }
  // Deleted: the same.
  if (fake()) {
    ASSERT_TRUE(fake_io_.Truncate(path() + ".index", 0).ok());
  } else {
    ASSERT_EQ(std::remove((path() + ".index").c_str()), 0);
  }
  auto store = OpenOrDie(options());
  EXPECT_EQ(store->recovered_entries(), Entries({{2, 5}, {4, 6}}));
}

TEST_P(DiskBlockStoreTest, ConcurrentWritersAndReaders) {
  auto store = OpenOrDie(options());
  std::vector<std::thread> threads;
  for (int t = 0; t < static_cast<int>(kSlots); ++t) {
    threads.emplace_back([&store, t] {
      for (int round = 0; round < 5; ++round) {
        const uint32_t n = static_cast<uint32_t>(t * 100 + round);
        ASSERT_TRUE(WriteBlock(*store, t, n).ok());
        std::vector<uint8_t> out;
        ASSERT_TRUE(ReadBlock(*store, t, n, &out).ok());
        ASSERT_EQ(out, Block(n));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->counters().writes, kSlots * 5);
  EXPECT_EQ(store->counters().reads, kSlots * 5);
  store.reset();  // the file is locked while open
  auto reopened = OpenOrDie(options());
  ASSERT_EQ(reopened->recovered_entries().size(), static_cast<size_t>(kSlots));
  for (const DiskIndexEntry& e : reopened->recovered_entries()) {
    EXPECT_EQ(e.key, Key(static_cast<uint32_t>(e.slot * 100 + 4)));
  }
}

// Direct reads (one aligned read of the whole slot, the default) and buffered ones (header,
// then payload) return the same bytes and refuse the same corruption, with the file's
// pages dropped from the page cache (on the real file system) so that the direct reads
// come from the device. ProbeRead counts the bytes and time of a read, not a read.
TEST_P(DiskBlockStoreTest, DirectAndBufferedReadsAgree) {
  {
    auto store = OpenOrDie(options());
    for (int64_t slot = 0; slot < kSlots; ++slot) ASSERT_TRUE(WriteBlock(*store, slot, 300 + slot).ok());
  }
  auto drop_page_cache = [&] {
    if (fake()) return;
    const int fd = ::open(path().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  };
  // A payload byte of slot 4 changed on disk (past the header's 192 bytes).
  auto corrupt_slot_4 = [&] {
    const int64_t offset = 4 * 8192 + 192 + 1234;
    if (fake()) {
      ASSERT_TRUE(fake_io_.FlipBit(path(), offset, 5).ok());
      return;
    }
    const int fd = ::open(path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t byte = 0;
    ASSERT_EQ(::pread(fd, &byte, 1, offset), 1);
    byte ^= 0x20;
    ASSERT_EQ(::pwrite(fd, &byte, 1, offset), 1);
    ::fsync(fd);
    ::close(fd);
  };
  bool corrupted = false;
  for (const bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "direct" : "buffered");
    DiskStoreOptions o = options();
    o.direct_reads = direct;
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    if (!corrupted) {
      corrupt_slot_4();
      corrupted = true;
    }
    drop_page_cache();
    std::vector<uint8_t> out;
    for (int64_t slot = 0; slot < kSlots; ++slot) {
      const absl::Status read = ReadBlock(*store, slot, static_cast<uint32_t>(300 + slot), &out);
      if (slot == 4) {
        EXPECT_TRUE(absl::IsDataLoss(read)) << read;
        EXPECT_NE(read.message().find("payload checksum"), std::string::npos) << read;
        continue;
      }
      ASSERT_TRUE(read.ok()) << "slot " << slot << ": " << read;
      EXPECT_EQ(out, Block(static_cast<uint32_t>(300 + slot))) << "slot " << slot;
    }
    DiskBlockStore::Counters c = store->counters();
    EXPECT_EQ(c.reads, kSlots - 1);
    EXPECT_EQ(c.corrupt_detected, 1);
    const int64_t bytes = c.bytes_read;
    ASSERT_TRUE(store->ProbeRead(0).ok());
    EXPECT_TRUE(absl::IsInvalidArgument(store->ProbeRead(kSlots)));
    c = store->counters();
    EXPECT_EQ(c.reads, kSlots - 1) << "a probe is not a read";
    EXPECT_EQ(c.bytes_read, bytes + static_cast<int64_t>(kBlockBytes));
    EXPECT_GT(c.read_seconds, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(FakeAndPosix, DiskBlockStoreTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Fake") : std::string("Posix");
                         });

// --- Faults, injected with the fake.

class DiskBlockStoreFaultTest : public ::testing::Test {
 protected:
  static constexpr const char* kPath = "/disk/kv.slots";
  static constexpr const char* kJournal = "/disk/kv.slots.journal";
  static constexpr const char* kIndex = "/disk/kv.slots.index";
  std::unique_ptr<DiskBlockStore> Open() { return OpenOrDie(Options(kPath, &io_)); }
  // Byte offset of `slot`'s payload in the file.
  int64_t PayloadAt(const DiskBlockStore& s, int64_t slot) {
    return slot * s.slot_bytes() + static_cast<int64_t>(s.header_bytes());
  }
  FakeFileIo io_;
  std::vector<uint8_t> out_ = std::vector<uint8_t>(kBlockBytes);
};

TEST_F(DiskBlockStoreFaultTest, FullDiskAtOpen) {
  io_.set_capacity_bytes(kSlots * 8192 - 1);
  absl::StatusOr<std::unique_ptr<DiskBlockStore>> store = DiskBlockStore::Open(Options(kPath, &io_));
  ASSERT_TRUE(IsIoError(store.status())) << store.status();
  EXPECT_NE(store.status().message().find(kPath), std::string::npos);
  EXPECT_FALSE(io_.Exists(kPath));
  // Room for the slots but not the index: the store opens (what it writes is found only
  // after a snapshot succeeds), counting the failure.
  io_.set_capacity_bytes(kSlots * 8192);
  auto opened = Open();
  ASSERT_NE(opened, nullptr);
  EXPECT_GE(opened->counters().io_errors, 1);
}

TEST_F(DiskBlockStoreFaultTest, FullDiskAtWrite) {
  auto store = Open();
  io_.set_capacity_bytes(io_.used_bytes());  // the files fit; nothing more does
  // The slot is preallocated and the journal record overwrites nothing past its end... but
  // the journal grows: the write lands, its record does not (counted, not returned).
  ASSERT_TRUE(WriteBlock(*store, 0, 1).ok());
  EXPECT_GE(store->counters().io_errors, 1);
  io_.set_capacity_bytes(0);  // filled up behind our back (copy-on-write file system)
  EXPECT_TRUE(IsIoError(WriteBlock(*store, 1, 2)));
  EXPECT_EQ(store->counters().writes, 1);
  io_.set_capacity_bytes(std::nullopt);
  ASSERT_TRUE(ReadBlock(*store, 0, 1, &out_).ok());
  // Once there is room again, the next write's compaction records what the journal missed.
  ASSERT_TRUE(WriteBlock(*store, 2, 3).ok());
  store.reset();
  EXPECT_EQ(Open()->recovered_entries(), Entries({{0, 1}, {2, 3}}));
}

TEST_F(DiskBlockStoreFaultTest, EioOnWriteAndSync) {
  auto store = Open();
  io_.FailNextWrites(1);
  absl::Status s = WriteBlock(*store, 0, 1);
  EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_TRUE(absl::IsDataLoss(ReadBlock(*store, 0, 1, &out_)));  // nothing claimed written
  io_.FailNextSyncs(1);
  EXPECT_TRUE(IsIoError(WriteBlock(*store, 0, 1)));
  const DiskBlockStore::Counters c = store->counters();
  EXPECT_EQ(c.io_errors, 2);
  EXPECT_EQ(c.writes, 0);
  EXPECT_EQ(c.bytes_written, 0);
  EXPECT_EQ(c.journal_records, 0);
  // The store recovers once the device does.
  ASSERT_TRUE(WriteBlock(*store, 0, 1).ok());
  ASSERT_TRUE(ReadBlock(*store, 0, 1, &out_).ok());
  EXPECT_EQ(out_, Block(1));
}

TEST_F(DiskBlockStoreFaultTest, ShortWriteIsIoError) {
  auto store = Open();
  io_.ShortWriteNext(100);
  EXPECT_TRUE(IsIoError(WriteBlock(*store, 1, 1)));
  EXPECT_TRUE(absl::IsDataLoss(ReadBlock(*store, 1, 1, &out_)));
  EXPECT_EQ(io_.fault_counters().short_writes, 1);
}

TEST_F(DiskBlockStoreFaultTest, TornWriteIsCaughtOnRead) {
  auto store = Open();
  ASSERT_TRUE(WriteBlock(*store, 1, 1).ok());
  io_.TornWriteNext(kBlockBytes / 2);  // the payload of the next write only half lands
  ASSERT_TRUE(WriteBlock(*store, 1, 2).ok());  // ... yet is reported OK
  absl::Status s = ReadBlock(*store, 1, 2, &out_);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
  EXPECT_EQ(store->counters().corrupt_detected, 1);
  EXPECT_EQ(io_.fault_counters().torn_writes, 1);
}

TEST_F(DiskBlockStoreFaultTest, BitFlipAnywhereInSlotIsRefused) {
  auto store = Open();
  ASSERT_TRUE(WriteBlock(*store, 3, 77).ok());
  const int64_t header_at = 3 * store->slot_bytes();
  // Every byte of the header in use (fields, tokens, CRC), and a sample of payload bytes.
  std::vector<int64_t> offsets;
  for (int64_t i = 0; i < 80 + 4 * kBlockTokens + 4; ++i) offsets.push_back(header_at + i);
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2047}, int64_t{kBlockBytes - 1}}) {
    offsets.push_back(PayloadAt(*store, 3) + i);
  }
  int64_t expected_corrupt = 0;
  for (int64_t offset : offsets) {
    for (int bit : {0, 5, 7}) {
      ASSERT_TRUE(io_.FlipBit(kPath, offset, bit).ok());
      absl::Status s = ReadBlock(*store, 3, 77, &out_);
      EXPECT_TRUE(absl::IsDataLoss(s)) << "offset " << offset << " bit " << bit << ": " << s;
      ++expected_corrupt;
      ASSERT_TRUE(io_.FlipBit(kPath, offset, bit).ok());  // restore
    }
  }
  ASSERT_TRUE(ReadBlock(*store, 3, 77, &out_).ok());
  EXPECT_EQ(out_, Block(77));
  EXPECT_EQ(store->counters().corrupt_detected, expected_corrupt);
}

TEST_F(DiskBlockStoreFaultTest, ForgedHeaderWithOtherTokensIsRefused) {
  // Whoever can write the file (or find a key collision) plants block 5's key over other
  // tokens, with valid checksums: the tokens decide, and the block is refused.
  auto store = Open();
  ASSERT_TRUE(WriteBlock(*store, 2, 5).ok());
  SlotHeader forged;
  forged.model_fingerprint = kFingerprint;
  forged.block_bytes = kBlockBytes;
  forged.slot = 2;
  forged.key = Key(5);
  forged.tokens = Tokens(6);
  const std::vector<uint8_t> payload = Block(6);
  forged.payload_crc = crc32c::Value(payload.data(), payload.size());
  std::string header(store->header_bytes(), '\0');
  EncodeSlotHeader(forged, store->header_bytes(), reinterpret_cast<uint8_t*>(header.data()));
  ASSERT_TRUE(io_.Overwrite(kPath, 2 * store->slot_bytes(), header).ok());
  ASSERT_TRUE(io_.Overwrite(kPath, PayloadAt(*store, 2),
                            std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()))
                  .ok());
  absl::Status s = ReadBlock(*store, 2, 5, &out_);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(store->counters().token_mismatches, 1);
}

TEST_F(DiskBlockStoreFaultTest, SlotCopiedToAnotherSlotIsDataLoss) {
  auto store = Open();
  ASSERT_TRUE(WriteBlock(*store, 0, 5).ok());
  // A misdirected write: slot 0's bytes land in slot 1, same key expected.
  const std::string bytes = *io_.Contents(kPath);
  const int64_t slot_bytes = store->slot_bytes();
  ASSERT_TRUE(io_.Overwrite(kPath, slot_bytes, bytes.substr(0, static_cast<size_t>(slot_bytes))).ok());
  absl::Status s = ReadBlock(*store, 1, 5, &out_);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST_F(DiskBlockStoreFaultTest, EioOnReadIsIoError) {
  auto store = Open();
  ASSERT_TRUE(WriteBlock(*store, 0, 5).ok());
  io_.FailNextReads(1);
  absl::Status s = ReadBlock(*store, 0, 5, &out_);
  EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_EQ(store->counters().io_errors, 1);
  EXPECT_EQ(store->counters().corrupt_detected, 0);
  ASSERT_TRUE(ReadBlock(*store, 0, 5, &out_).ok());
}

TEST_F(DiskBlockStoreFaultTest, TruncatedDataFileIsIoErrorNotData) {
  auto store = Open();
  ASSERT_TRUE(WriteBlock(*store, 5, 5).ok());
  ASSERT_TRUE(io_.Truncate(kPath, 5 * store->slot_bytes() + 100).ok());
  EXPECT_TRUE(IsIoError(ReadBlock(*store, 5, 5, &out_)));
}

TEST_F(DiskBlockStoreFaultTest, WriteBatchCommitsTogether) {
  auto store = Open();
  const std::vector<uint8_t> b1 = Block(1), b2 = Block(2), b3 = Block(3);
  const std::vector<int32_t> t1 = Tokens(1), t2 = Tokens(2), t3 = Tokens(3);
  std::vector<DiskBlockStore::WriteRequest> batch = {{0, Key(1), t1, b1.data(), Content::kCached},
                                                     {kSlots, Key(2), t2, b2.data(), Content::kCached},  // bad slot
                                                     {2, Key(3), t3, b3.data(), Content::kCached}};
  std::vector<absl::Status> results = store->WriteBatch(batch);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(absl::IsInvalidArgument(results[1])) << results[1];
  EXPECT_TRUE(results[2].ok()) << results[2];
  EXPECT_EQ(store->counters().journal_records, 2);
  ASSERT_TRUE(ReadBlock(*store, 2, 3, &out_).ok());
  // A failed sync fails every write it covered: none is claimed durable, none journaled.
  batch[1].slot = 1;
  io_.FailNextSyncs(1);
  results = store->WriteBatch(batch);
  for (const absl::Status& s : results) EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_EQ(store->counters().journal_records, 2);
  EXPECT_EQ(store->counters().writes, 2);
  // The journal still holds the first batch's records; whatever the slots hold now, a
  // restart checks each against its entry (here the failed batch rewrote the same blocks).
  store.reset();
  store = Open();
  EXPECT_EQ(store->recovered_entries(), Entries({{0, 1}, {2, 3}}));
  ASSERT_TRUE(ReadBlock(*store, 0, 1, &out_).ok());
  EXPECT_EQ(out_, Block(1));
}

TEST_F(DiskBlockStoreFaultTest, RenewedRecordsKeepTheRestartsEvictionOrder) {
  {
    auto store = Open();
    for (uint32_t n = 0; n < 4; ++n) ASSERT_TRUE(WriteBlock(*store, n, n).ok());
    // Block 0 was used again: renewed, it is the newest now; a renewal of a slot that holds
    // another block is refused and changes nothing.
    const std::vector<DiskBlockStore::WriteRequest> renew = {{0, Key(0), {}, nullptr, Content::kRecordOnly},
                                                             {1, Key(9), {}, nullptr, Content::kRecordOnly}};
    const std::vector<absl::Status> results = store->WriteBatch(renew);
    EXPECT_TRUE(results[0].ok()) << results[0];
    EXPECT_TRUE(absl::IsNotFound(results[1])) << results[1];
    EXPECT_EQ(store->counters().writes, 4);  // no data written
  }
  auto store = Open();  // replayed from the journal: oldest first
  EXPECT_EQ(store->recovered_entries(), Entries({{1, 1}, {2, 2}, {3, 3}, {0, 0}}));
  store.reset();
  EXPECT_EQ(Open()->recovered_entries(), Entries({{1, 1}, {2, 2}, {3, 3}, {0, 0}}));  // and from the snapshot
}

TEST_F(DiskBlockStoreFaultTest, TornJournalTailEndsTheReplay) {
  {
    auto store = Open();
    for (uint32_t n = 0; n < 4; ++n) ASSERT_TRUE(WriteBlock(*store, n, n).ok());
  }
  // A crash in the middle of the last record's append: it is cut short.
  const int64_t size = static_cast<int64_t>(io_.Contents(kJournal)->size());
  ASSERT_TRUE(io_.Truncate(kJournal, size - 10).ok());
  auto store = Open();
  EXPECT_EQ(store->recovered_entries(), Entries({{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(store->counters().journal_replayed, 3);
  EXPECT_EQ(store->counters().index_ignored, 0);
  // A bit flipped in a middle record ends the replay there too.
  for (uint32_t n = 3; n < 6; ++n) ASSERT_TRUE(WriteBlock(*store, n, n).ok());
  store.reset();
  ASSERT_TRUE(io_.FlipBit(kJournal, 24 + 44 + 20, 3).ok());  // the second record's key
  store = Open();
  EXPECT_EQ(store->recovered_entries(), Entries({{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  std::vector<uint8_t> out;
  ASSERT_TRUE(ReadBlock(*store, 3, 3, &out).ok());
}

TEST_F(DiskBlockStoreFaultTest, JournalOfAnotherGenerationIsNotReplayed) {
  // A crash between a compaction's snapshot and its journal restart leaves the old journal
  // next to the new snapshot: its records are in the snapshot already, and the slot they
  // name may hold another block since — they are not replayed.
  std::string old_journal;
  {
    auto store = Open();
    ASSERT_TRUE(WriteBlock(*store, 0, 1).ok());
    old_journal = *io_.Contents(kJournal);
    ASSERT_TRUE(store->Compact().ok());
    ASSERT_TRUE(WriteBlock(*store, 0, 2, Content::kPrivate).ok());
    ASSERT_TRUE(WriteBlock(*store, 1, 3).ok());
    ASSERT_TRUE(store->Compact().ok());
  }
  ASSERT_TRUE(io_.Overwrite(kJournal, 0, old_journal).ok());
  auto store = Open();
  EXPECT_EQ(store->recovered_entries(), Entries({{1, 3}}));
  EXPECT_EQ(store->counters().index_ignored, 0);
}

TEST_F(DiskBlockStoreFaultTest, CorruptJournalHeaderFallsBackToSlotScan) {
  {
    auto store = Open();
    ASSERT_TRUE(WriteBlock(*store, 0, 1).ok());
    ASSERT_TRUE(WriteBlock(*store, 3, 2).ok());
  }
  ASSERT_TRUE(io_.FlipBit(kJournal, 9, 0).ok());
  auto store = Open();
  EXPECT_EQ(store->recovered_entries(), Entries({{0, 1}, {3, 2}}));
  EXPECT_EQ(store->counters().index_ignored, 1);
  EXPECT_EQ(store->counters().slots_scanned, kSlots);
  EXPECT_NE(store->index_ignored_reason().find("journal"), std::string::npos);
}

TEST_F(DiskBlockStoreFaultTest, JournalIsCompactedAsItGrows) {
  auto store = Open();
  // Rewriting the same slots: the index stays small, the journal would grow without bound.
  for (uint32_t n = 0; n < 3000; ++n) ASSERT_TRUE(WriteBlock(*store, n % 2, n).ok());
  const DiskBlockStore::Counters c = store->counters();
  EXPECT_EQ(c.journal_records, 3000);
  EXPECT_GE(c.compactions, 3);  // at open, then every ~1028 records
  EXPECT_LE(static_cast<int64_t>(io_.Contents(kJournal)->size()), 24 + 44 * 1030);
  store.reset();
  EXPECT_EQ(Open()->recovered_entries(), Entries({{0, 2998}, {1, 2999}}));
}

TEST_F(DiskBlockStoreFaultTest, UnreadableIndexIsCountedAndScanned) {
  {
    auto store = Open();
    ASSERT_TRUE(WriteBlock(*store, 0, 5).ok());
  }
  io_.FailNextReads(1);
  auto store = Open();
  EXPECT_EQ(store->recovered_entries(), Entries({{0, 5}}));
  EXPECT_EQ(store->counters().index_ignored, 1);
  EXPECT_EQ(store->counters().io_errors, 1);
}

TEST_F(DiskBlockStoreFaultTest, OlderFormatFilesAreRecognisedAndIgnored) {
  // The format before SHA-256 keys: a 64-byte slot header {magic, version 1, ...} and an
  // index {"KVTI", version 1, ...} naming 64-bit hashes. Never trusted.
  {
    auto file = io_.OpenForReadWrite(kPath, kSlots * 8192);
    ASSERT_TRUE(file.ok());
    for (int64_t slot = 0; slot < 3; ++slot) {
      uint8_t v1[64] = {};
      coding::PutFixed32(v1, kSlotMagic);
      coding::PutFixed32(v1 + 4, 1);
      coding::PutFixed64(v1 + 8, kFingerprint);
      coding::PutFixed32(v1 + 60, crc32c::Value(v1, 60));
      ASSERT_TRUE((*file)->Pwrite(slot * 8192, v1, sizeof v1).ok());
    }
  }
  std::string v1_index(60, '\0');
  auto* p = reinterpret_cast<uint8_t*>(v1_index.data());
  coding::PutFixed32(p, 0x4954564Bu);
  coding::PutFixed32(p + 4, 1);
  ASSERT_TRUE(io_.WriteFileAtomically(kIndex, v1_index).ok());
  auto store = Open();
  EXPECT_TRUE(store->recovered_entries().empty());
  EXPECT_EQ(store->counters().index_ignored, 1);
  EXPECT_NE(store->index_ignored_reason().find("older"), std::string::npos) << store->index_ignored_reason();
  EXPECT_EQ(store->counters().slots_scanned, 0);  // a recognised index says what the file is
  // Without the index, the scan recognises the older slots and uses none of them.
  store.reset();
  ASSERT_TRUE(io_.Truncate(kIndex, 0).ok());
  store = Open();
  EXPECT_TRUE(store->recovered_entries().empty());
  EXPECT_EQ(store->counters().older_format_slots, 3);
  EXPECT_NE(store->index_ignored_reason().find("3 slots of an older format"), std::string::npos)
      << store->index_ignored_reason();
  EXPECT_TRUE(absl::IsDataLoss(ReadBlock(*store, 0, 1, &out_)));
}

}  // namespace
}  // namespace kvtier
