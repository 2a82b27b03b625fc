#include "storage/disk_block_store.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/errors.h"
#include "testing/fake_file_io.h"
#include "temp_dir.h"

namespace kvtier {
namespace {

using ::kvtier::testing::StorageTempDir;

constexpr size_t kBlockBytes = 5000;  // not a multiple of 4096: slots pad to 8192
constexpr int64_t kSlots = 6;
constexpr uint64_t kFingerprint = 0x1234567890ABCDEFull;

std::vector<uint8_t> Block(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(kBlockBytes);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

DiskStoreOptions Options(const std::string& path, FileIo* io) {
  DiskStoreOptions o;
  o.path = path;
  o.num_slots = kSlots;
  o.block_bytes = kBlockBytes;
  o.model_fingerprint = kFingerprint;
  o.block_tokens = 16;
  o.io = io;
  return o;
}

std::unique_ptr<DiskBlockStore> OpenOrDie(const DiskStoreOptions& o) {
  auto store = DiskBlockStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
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
  EXPECT_EQ(store->slot_bytes(), 8192);
  EXPECT_EQ(store->slot_bytes() % DiskBlockStore::kSlotAlignment, 0);
  EXPECT_TRUE(store->recovered_entries().empty());
  EXPECT_EQ(store->counters().index_ignored, 0);
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
    const auto block = Block(static_cast<uint32_t>(slot));
    ASSERT_TRUE(store->Write(slot, 100 + static_cast<uint64_t>(slot), 16, block.data()).ok());
  }
  for (int64_t slot = kSlots - 1; slot >= 0; --slot) {
    std::vector<uint8_t> out(kBlockBytes);
    ASSERT_TRUE(store->Read(slot, 100 + static_cast<uint64_t>(slot), out.data()).ok()) << slot;
    EXPECT_EQ(out, Block(static_cast<uint32_t>(slot)));
  }
  // Overwriting a slot replaces its block.
  ASSERT_TRUE(store->Write(2, 999, 5, Block(999).data()).ok());
  std::vector<uint8_t> out(kBlockBytes);
  ASSERT_TRUE(store->Read(2, 999, out.data()).ok());
  EXPECT_EQ(out, Block(999));
  EXPECT_TRUE(absl::IsDataLoss(store->Read(2, 102, out.data())));
  const DiskBlockStore::Counters c = store->counters();
  EXPECT_EQ(c.writes, kSlots + 1);
  EXPECT_EQ(c.reads, kSlots + 1);
  EXPECT_EQ(c.bytes_written, (kSlots + 1) * static_cast<int64_t>(kBlockBytes));
  EXPECT_EQ(c.bytes_read, c.bytes_written);
  EXPECT_EQ(c.corrupt_detected, 1);
  EXPECT_EQ(c.io_errors, 0);
}

TEST_P(DiskBlockStoreTest, EmptySlotAndWrongHashAreDataLoss) {
  auto store = OpenOrDie(options());
  std::vector<uint8_t> out(kBlockBytes);
  absl::Status empty = store->Read(3, 7, out.data());
  EXPECT_TRUE(absl::IsDataLoss(empty)) << empty;
  EXPECT_NE(empty.message().find("slot 3"), std::string::npos) << empty;
  ASSERT_TRUE(store->Write(3, 7, 16, Block(1).data()).ok());
  absl::Status wrong = store->Read(3, 8, out.data());
  EXPECT_TRUE(absl::IsDataLoss(wrong)) << wrong;
  EXPECT_NE(wrong.message().find("slot 3"), std::string::npos);
  EXPECT_EQ(store->counters().corrupt_detected, 2);
}

TEST_P(DiskBlockStoreTest, BadArguments) {
  auto store = OpenOrDie(options());
  const auto block = Block(1);
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(kSlots, 1, 1, block.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(-1, 1, 1, block.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(0, 1, 17, block.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Write(0, 1, -1, block.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Read(kSlots, 1, out.data())));
  EXPECT_TRUE(absl::IsInvalidArgument(store->SaveIndex({{kSlots, 1, 1}})));
  EXPECT_TRUE(absl::IsInvalidArgument(store->SaveIndex({{1, 1, 1}, {1, 2, 2}})));
  DiskStoreOptions o = options();
  o.num_slots = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(DiskBlockStore::Open(o).status()));
  o = options();
  o.block_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(DiskBlockStore::Open(o).status()));
  o = options();
  o.path.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(DiskBlockStore::Open(o).status()));
}

TEST_P(DiskBlockStoreTest, RestartRecoversIndexAndBlocks) {
  const std::vector<DiskIndexEntry> entries = {{4, 0xAAAA, 16}, {1, 0xBBBB, 7}};
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(store->Write(4, 0xAAAA, 16, Block(4).data()).ok());
    ASSERT_TRUE(store->Write(1, 0xBBBB, 7, Block(1).data()).ok());
    ASSERT_TRUE(store->SaveIndex(entries).ok());
  }
  auto store = OpenOrDie(options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovered_entries(), entries);
  EXPECT_EQ(store->counters().index_ignored, 0);
  std::vector<uint8_t> out(kBlockBytes);
  ASSERT_TRUE(store->Read(4, 0xAAAA, out.data()).ok());
  EXPECT_EQ(out, Block(4));
  ASSERT_TRUE(store->Read(1, 0xBBBB, out.data()).ok());
  EXPECT_EQ(out, Block(1));
}

TEST_P(DiskBlockStoreTest, OtherModelOrGeometryIgnoresEntries) {
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(store->Write(0, 11, 16, Block(0).data()).ok());
    ASSERT_TRUE(store->SaveIndex({{0, 11, 16}}).ok());
  }
  {  // Another model: its index is ignored, and its slot is never taken for data.
    DiskStoreOptions o = options();
    o.model_fingerprint = kFingerprint + 1;
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->recovered_entries().empty());
    EXPECT_EQ(store->counters().index_ignored, 1);
    EXPECT_NE(store->index_ignored_reason().find("fingerprint"), std::string::npos);
    std::vector<uint8_t> out(kBlockBytes);
    EXPECT_TRUE(absl::IsDataLoss(store->Read(0, 11, out.data())));
  }
  {  // Another block size.
    DiskStoreOptions o = options();
    o.block_bytes = kBlockBytes + 8;
    auto store = OpenOrDie(o);
    EXPECT_TRUE(store->recovered_entries().empty());
    EXPECT_EQ(store->counters().index_ignored, 1);
    std::vector<uint8_t> out(o.block_bytes);
    EXPECT_TRUE(absl::IsDataLoss(store->Read(0, 11, out.data())));
  }
  {  // Another slot count or block token count.
    DiskStoreOptions o = options();
    o.num_slots = kSlots + 1;
    EXPECT_TRUE(OpenOrDie(o)->recovered_entries().empty());
    o = options();
    o.block_tokens = 32;
    EXPECT_TRUE(OpenOrDie(o)->recovered_entries().empty());
  }
  // The original model still finds its block (the foreign opens did not destroy it).
  auto store = OpenOrDie(options());
  ASSERT_EQ(store->recovered_entries().size(), 1u);
  std::vector<uint8_t> out(kBlockBytes);
  ASSERT_TRUE(store->Read(0, 11, out.data()).ok());
  EXPECT_EQ(out, Block(0));
}

TEST_P(DiskBlockStoreTest, CorruptIndexIsIgnoredAndCounted) {
  std::string good;
  {
    auto store = OpenOrDie(options());
    ASSERT_TRUE(store->Write(2, 5, 16, Block(2).data()).ok());
    ASSERT_TRUE(store->SaveIndex({{2, 5, 16}}).ok());
    good = *io()->ReadWholeFile(store->index_path());
  }
  std::mt19937 rng(3);
  std::string random_bytes(200, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng());
  std::string bad_crc = good;
  bad_crc.back() = static_cast<char>(bad_crc.back() ^ 1);
  const std::vector<std::string> corrupt = {good.substr(0, good.size() / 2), "",
                                            random_bytes, bad_crc};
  for (const std::string& contents : corrupt) {
    ASSERT_TRUE(io()->WriteFileAtomically(path() + ".index", contents).ok());
    auto store = OpenOrDie(options());
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->recovered_entries().empty());
    EXPECT_EQ(store->counters().index_ignored, 1);
    EXPECT_FALSE(store->index_ignored_reason().empty());
    // Still usable: write, read, and save a fresh index.
    std::vector<uint8_t> out(kBlockBytes);
    ASSERT_TRUE(store->Read(2, 5, out.data()).ok());
    ASSERT_TRUE(store->Write(3, 6, 1, Block(3).data()).ok());
    ASSERT_TRUE(store->SaveIndex({{2, 5, 16}}).ok());
  }
  EXPECT_EQ(OpenOrDie(options())->recovered_entries().size(), 1u);
}

TEST_P(DiskBlockStoreTest, ConcurrentWritersAndReaders) {
  auto store = OpenOrDie(options());
  std::vector<std::thread> threads;
  for (int t = 0; t < static_cast<int>(kSlots); ++t) {
    threads.emplace_back([&store, t] {
      for (int round = 0; round < 5; ++round) {
        const uint32_t seed = static_cast<uint32_t>(t * 100 + round);
        const auto block = Block(seed);
        ASSERT_TRUE(store->Write(t, seed, 16, block.data()).ok());
        std::vector<uint8_t> out(kBlockBytes);
        ASSERT_TRUE(store->Read(t, seed, out.data()).ok());
        ASSERT_EQ(out, block);
        ASSERT_TRUE(store->SaveIndex({{t, seed, 16}}).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->counters().writes, kSlots * 5);
  EXPECT_EQ(store->counters().reads, kSlots * 5);
  store.reset();  // the file is locked while open
  EXPECT_EQ(OpenOrDie(options())->recovered_entries().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(FakeAndPosix, DiskBlockStoreTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Fake") : std::string("Posix");
                         });

// --- Faults, injected with the fake.

class DiskBlockStoreFaultTest : public ::testing::Test {
 protected:
  static constexpr const char* kPath = "/disk/kv.slots";
  std::unique_ptr<DiskBlockStore> Open() { return OpenOrDie(Options(kPath, &io_)); }
  // Byte offset of `slot`'s payload in the file.
  int64_t PayloadAt(const DiskBlockStore& s, int64_t slot) {
    return slot * s.slot_bytes() + static_cast<int64_t>(DiskBlockStore::kSlotHeaderBytes);
  }
  FakeFileIo io_;
  std::vector<uint8_t> out_ = std::vector<uint8_t>(kBlockBytes);
};

TEST_F(DiskBlockStoreFaultTest, FullDiskAtOpen) {
  io_.set_capacity_bytes(kSlots * 8192 - 1);
  absl::StatusOr<std::unique_ptr<DiskBlockStore>> store =
      DiskBlockStore::Open(Options(kPath, &io_));
  ASSERT_TRUE(IsIoError(store.status())) << store.status();
  EXPECT_NE(store.status().message().find(kPath), std::string::npos);
  EXPECT_FALSE(io_.Exists(kPath));
  io_.set_capacity_bytes(kSlots * 8192);
  EXPECT_NE(Open(), nullptr);
}

TEST_F(DiskBlockStoreFaultTest, FullDiskAtWriteAndIndexSave) {
  auto store = Open();
  io_.set_capacity_bytes(io_.used_bytes());  // the file fits; nothing more does
  ASSERT_TRUE(store->Write(0, 1, 16, Block(0).data()).ok());  // preallocated: fits
  EXPECT_TRUE(IsIoError(store->SaveIndex({{0, 1, 16}})));
  EXPECT_FALSE(io_.Exists(store->index_path()));
  io_.set_capacity_bytes(0);  // filled up behind our back (copy-on-write file system)
  EXPECT_TRUE(IsIoError(store->Write(1, 2, 16, Block(1).data())));
  EXPECT_EQ(store->counters().io_errors, 2);
  EXPECT_EQ(store->counters().writes, 1);
  io_.set_capacity_bytes(std::nullopt);
  ASSERT_TRUE(store->Read(0, 1, out_.data()).ok());
  ASSERT_TRUE(store->SaveIndex({{0, 1, 16}}).ok());
}

TEST_F(DiskBlockStoreFaultTest, EioOnWriteAndSync) {
  auto store = Open();
  io_.FailNextWrites(1);
  absl::Status s = store->Write(0, 1, 16, Block(0).data());
  EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_TRUE(absl::IsDataLoss(store->Read(0, 1, out_.data())));  // nothing claimed written
  io_.FailNextSyncs(1);
  EXPECT_TRUE(IsIoError(store->Write(0, 1, 16, Block(0).data())));
  io_.FailNextWrites(1);
  EXPECT_TRUE(IsIoError(store->SaveIndex({})));
  const DiskBlockStore::Counters c = store->counters();
  EXPECT_EQ(c.io_errors, 3);
  EXPECT_EQ(c.writes, 0);
  EXPECT_EQ(c.bytes_written, 0);
  // The store recovers once the device does.
  ASSERT_TRUE(store->Write(0, 1, 16, Block(0).data()).ok());
  ASSERT_TRUE(store->Read(0, 1, out_.data()).ok());
  EXPECT_EQ(out_, Block(0));
}

TEST_F(DiskBlockStoreFaultTest, ShortWriteIsIoError) {
  auto store = Open();
  io_.ShortWriteNext(100);
  EXPECT_TRUE(IsIoError(store->Write(1, 1, 16, Block(1).data())));
  EXPECT_TRUE(absl::IsDataLoss(store->Read(1, 1, out_.data())));
  EXPECT_EQ(io_.fault_counters().short_writes, 1);
}

TEST_F(DiskBlockStoreFaultTest, TornWriteIsCaughtOnRead) {
  auto store = Open();
  ASSERT_TRUE(store->Write(1, 1, 16, Block(1).data()).ok());
  io_.TornWriteNext(kBlockBytes / 2);  // the payload of the next write only half lands
  ASSERT_TRUE(store->Write(1, 2, 16, Block(2).data()).ok());  // ... yet is reported OK
  absl::Status s = store->Read(1, 2, out_.data());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
  EXPECT_EQ(store->counters().corrupt_detected, 1);
  EXPECT_EQ(io_.fault_counters().torn_writes, 1);
}

TEST_F(DiskBlockStoreFaultTest, BitFlipAnywhereInSlotIsDataLoss) {
  auto store = Open();
  ASSERT_TRUE(store->Write(3, 77, 9, Block(3).data()).ok());
  const int64_t header_at = 3 * store->slot_bytes();
  // Every header byte (each of a few bits), and a sample of payload bytes.
  std::vector<int64_t> offsets;
  for (int64_t i = 0; i < static_cast<int64_t>(DiskBlockStore::kSlotHeaderBytes); ++i) {
    offsets.push_back(header_at + i);
  }
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2047}, int64_t{kBlockBytes - 1}}) {
    offsets.push_back(PayloadAt(*store, 3) + i);
  }
  int64_t expected_corrupt = 0;
  for (int64_t offset : offsets) {
    for (int bit : {0, 5, 7}) {
      ASSERT_TRUE(io_.FlipBit(kPath, offset, bit).ok());
      absl::Status s = store->Read(3, 77, out_.data());
      EXPECT_TRUE(absl::IsDataLoss(s)) << "offset " << offset << " bit " << bit << ": " << s;
      ++expected_corrupt;
      ASSERT_TRUE(io_.FlipBit(kPath, offset, bit).ok());  // restore
    }
  }
  ASSERT_TRUE(store->Read(3, 77, out_.data()).ok());
  EXPECT_EQ(out_, Block(3));
  EXPECT_EQ(store->counters().corrupt_detected, expected_corrupt);
}

TEST_F(DiskBlockStoreFaultTest, SlotCopiedToAnotherSlotIsDataLoss) {
  auto store = Open();
  ASSERT_TRUE(store->Write(0, 5, 16, Block(0).data()).ok());
  // A misdirected write: slot 0's bytes land in slot 1, same hash expected (made while
  // the store is closed: it holds its file locked).
  const std::string bytes = *io_.Contents(kPath);
  const int64_t slot_bytes = store->slot_bytes();
  store.reset();
  {
    auto file = io_.OpenForReadWrite(kPath, 0);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE((*file)->Pwrite(slot_bytes, bytes.data(), static_cast<size_t>(slot_bytes)).ok());
  }
  store = Open();
  absl::Status s = store->Read(1, 5, out_.data());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST_F(DiskBlockStoreFaultTest, EioOnReadIsIoError) {
  auto store = Open();
  ASSERT_TRUE(store->Write(0, 5, 16, Block(0).data()).ok());
  io_.FailNextReads(1);
  absl::Status s = store->Read(0, 5, out_.data());
  EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_EQ(store->counters().io_errors, 1);
  EXPECT_EQ(store->counters().corrupt_detected, 0);
  ASSERT_TRUE(store->Read(0, 5, out_.data()).ok());
}

TEST_F(DiskBlockStoreFaultTest, TruncatedDataFileIsIoErrorNotData) {
  auto store = Open();
  ASSERT_TRUE(store->Write(5, 5, 16, Block(5).data()).ok());
  ASSERT_TRUE(io_.Truncate(kPath, 5 * store->slot_bytes() + 100).ok());
  EXPECT_TRUE(IsIoError(store->Read(5, 5, out_.data())));
}

TEST_F(DiskBlockStoreFaultTest, TruncatedOrUnreadableIndexIsIgnored) {
  {
    auto store = Open();
    ASSERT_TRUE(store->Write(0, 5, 16, Block(0).data()).ok());
    ASSERT_TRUE(store->SaveIndex({{0, 5, 16}}).ok());
  }
  const std::string index = std::string(kPath) + ".index";
  const int64_t size = static_cast<int64_t>(io_.Contents(index)->size());
  ASSERT_TRUE(io_.Truncate(index, size - 1).ok());
  auto store = Open();
  EXPECT_TRUE(store->recovered_entries().empty());
  EXPECT_EQ(store->counters().index_ignored, 1);
  EXPECT_EQ(store->counters().io_errors, 0);
  ASSERT_TRUE(store->SaveIndex({{0, 5, 16}}).ok());
  store.reset();  // the file is locked while open
  io_.FailNextReads(1);
  auto unreadable = Open();
  EXPECT_TRUE(unreadable->recovered_entries().empty());
  EXPECT_EQ(unreadable->counters().index_ignored, 1);
  EXPECT_EQ(unreadable->counters().io_errors, 1);
  unreadable.reset();
  EXPECT_EQ(Open()->recovered_entries().size(), 1u);
}

TEST_F(DiskBlockStoreFaultTest, FailedIndexSaveKeepsThePreviousIndex) {
  auto store = Open();
  ASSERT_TRUE(store->SaveIndex({{0, 5, 16}}).ok());
  io_.FailNextSyncs(1);
  EXPECT_TRUE(IsIoError(store->SaveIndex({{1, 6, 16}})));
  store.reset();  // the file is locked while open
  const std::vector<DiskIndexEntry> expected = {{0, 5, 16}};
  EXPECT_EQ(Open()->recovered_entries(), expected);
}

}  // namespace
}  // namespace kvtier
