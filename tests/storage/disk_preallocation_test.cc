// Reserving a disk tier's file piecewise: RandomAccessFile::Allocate (POSIX and the fake),
// and DiskBlockStore opened with only its first slots reserved, the rest reserved later
// by PreallocateSlots while the reserved slots are already written and read.
#include <sys/stat.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/errors.h"
#include "storage/disk_block_store.h"
#include "storage/file_io.h"
#include "temp_dir.h"
#include "testing/fake_file_io.h"

namespace kvtier {
namespace {

using ::kvtier::testing::StorageTempDir;

TEST(DiskPreallocationTest, PosixAllocateGrowsTheFileAndReservesItsSpace) {
  StorageTempDir dir;
  const std::string path = dir.File("slots");
  auto file = DefaultFileIo()->OpenForReadWrite(path, 0);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->Size(), 0);
  ASSERT_TRUE((*file)->Pwrite(0, "head", 4).ok());
  ASSERT_TRUE((*file)->Allocate(0, 8192).ok());
  ASSERT_TRUE((*file)->Allocate(8192, 8192).ok());
  EXPECT_EQ(*(*file)->Size(), 16384);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GE(st.st_blocks * 512, 16384) << "space is reserved, not sparse";
  char head[4];
  ASSERT_TRUE((*file)->Pread(0, 4, head).ok());
  EXPECT_EQ(std::string(head, 4), "head") << "allocating kept the bytes there";
  ASSERT_TRUE((*file)->Allocate(0, 100).ok());  // inside: nothing changes
  EXPECT_EQ(*(*file)->Size(), 16384);
  EXPECT_TRUE(absl::IsInvalidArgument((*file)->Allocate(-1, 10)));
}

TEST(DiskPreallocationTest, FakeAllocateIsRefusedByAFullDiskOnly) {
  FakeFileIo io;
  auto file = io.OpenForReadWrite("/d/slots", 100);
  ASSERT_TRUE(file.ok());
  io.FailNextWrites(1);
  io.FailNextSyncs(1);
  ASSERT_TRUE((*file)->Allocate(100, 100).ok());  // armed write and sync faults stay armed
  EXPECT_EQ(io.used_bytes(), 200);
  io.set_capacity_bytes(250);
  absl::Status full = (*file)->Allocate(200, 100);
  EXPECT_TRUE(IsIoError(full)) << full;
  EXPECT_NE(full.message().find("No space left"), std::string::npos) << full;
  EXPECT_EQ(*(*file)->Size(), 200);
  EXPECT_EQ(io.fault_counters().no_space, 1);
  EXPECT_EQ(io.fault_counters().failed_writes, 0);
  EXPECT_EQ(io.fault_counters().failed_syncs, 0);
}

DiskStoreOptions PreallocOptions(FileIo* io, std::optional<int64_t> reserved_at_open) {
  DiskStoreOptions o;
  o.path = "/d/slots";
  o.num_slots = 6;
  o.block_bytes = 1000;
  o.block_tokens = 4;
  o.model_fingerprint = 9;
  o.io = io;
  o.slots_reserved_at_open = reserved_at_open;
  return o;
}

TEST(DiskPreallocationTest, StoreReservesItsFirstSlotsAtOpenAndTheRestOnRequest) {
  FakeFileIo io;
  auto store = DiskBlockStore::Open(PreallocOptions(&io, 2));
  ASSERT_TRUE(store.ok()) << store.status();
  DiskBlockStore& s = **store;
  EXPECT_EQ(s.slots_in_file_at_open(), 2);
  auto file_size = [&] { return static_cast<int64_t>(io.Contents("/d/slots")->size()); };
  EXPECT_EQ(file_size(), 2 * s.slot_bytes());
  std::vector<uint8_t> block(1000, 0x5a), back(1000);
  const Sha256Digest k77 = Sha256::Of("77", 2), k78 = Sha256::Of("78", 2);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  ASSERT_TRUE(s.Write(1, k77, tokens, block.data(), DiskBlockStore::Content::kCached).ok());
  ASSERT_TRUE(s.PreallocateSlots(2, 4).ok());
  EXPECT_EQ(file_size(), 4 * s.slot_bytes());
  ASSERT_TRUE(s.Write(3, k78, tokens, block.data(), DiskBlockStore::Content::kCached).ok());
  ASSERT_TRUE(s.Read(1, k77, tokens, back.data()).ok());
  EXPECT_EQ(back, block);
  ASSERT_TRUE(s.Read(3, k78, tokens, back.data()).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(s.PreallocateSlots(4, 7)));
  EXPECT_TRUE(absl::IsInvalidArgument(s.PreallocateSlots(3, 2)));

  io.set_capacity_bytes(io.used_bytes());
  absl::Status full = s.PreallocateSlots(4, 6);
  EXPECT_TRUE(IsIoError(full)) << full;
  EXPECT_EQ(s.counters().io_errors, 1);
  ASSERT_TRUE(s.Read(3, k78, tokens, back.data()).ok()) << "the reserved slots still serve";
}

TEST(DiskPreallocationTest, AFileReservedBeforeCountsWhole) {
  FakeFileIo io;
  {
    auto first = DiskBlockStore::Open(PreallocOptions(&io, std::nullopt));  // all six at open
    ASSERT_TRUE(first.ok());
    EXPECT_EQ((*first)->slots_in_file_at_open(), 6);
  }
  auto again = DiskBlockStore::Open(PreallocOptions(&io, 0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->slots_in_file_at_open(), 6);
  auto other = DiskBlockStore::Open([&] {
    DiskStoreOptions o = PreallocOptions(&io, 0);
    o.path = "/d/other";
    return o;
  }());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->slots_in_file_at_open(), 0);
}

}  // namespace
}  // namespace kvtier
