#include "testing/fake_file_io.h"

#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/errors.h"

namespace kvtier {
namespace {

std::unique_ptr<RandomAccessFile> OpenFileOrDie(FakeFileIo& io, const std::string& path,
                                            int64_t size) {
  auto file = io.OpenForReadWrite(path, size);
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : nullptr;
}

TEST(FakeFileIoTest, OpenPreallocatesZerosAndRoundTrips) {
  FakeFileIo io;
  auto file = OpenFileOrDie(io, "/d/a", 100);
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(io.Exists("/d/a"));
  EXPECT_EQ(*file->Size(), 100);
  EXPECT_EQ(io.used_bytes(), 100);
  char buf[10];
  ASSERT_TRUE(file->Pread(90, 10, buf).ok());
  EXPECT_EQ(std::string(buf, 10), std::string(10, '\0'));
  ASSERT_TRUE(file->Pwrite(5, "hello", 5).ok());
  ASSERT_TRUE(file->Sync().ok());
  ASSERT_TRUE(file->Pread(5, 5, buf).ok());
  EXPECT_EQ(std::string(buf, 5), "hello");
  // Open, the file is locked: a second open is refused and changes nothing.
  absl::Status locked = io.OpenForReadWrite("/d/a", 200).status();
  EXPECT_TRUE(absl::IsUnavailable(locked)) << locked;
  EXPECT_NE(locked.message().find("/d/a"), std::string::npos) << locked;
  EXPECT_EQ(io.used_bytes(), 100);
  // Closed, reopening never shrinks and keeps the bytes.
  file.reset();
  auto again = OpenFileOrDie(io, "/d/a", 10);
  ASSERT_TRUE(again->Pread(5, 5, buf).ok());
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ(*again->Size(), 100);
}

TEST(FakeFileIoTest, ShortReadPastEndIsIoError) {
  FakeFileIo io;
  auto file = OpenFileOrDie(io, "f", 8);
  char buf[16];
  absl::Status s = file->Pread(4, 8, buf);
  EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_TRUE(IsIoError(file->Pread(9, 0, buf)));
}

TEST(FakeFileIoTest, ReadWholeFileAndAtomicWrite) {
  FakeFileIo io;
  EXPECT_TRUE(absl::IsNotFound(io.ReadWholeFile("x").status()));
  ASSERT_TRUE(io.WriteFileAtomically("x", "one").ok());
  ASSERT_TRUE(io.WriteFileAtomically("x", "second").ok());
  EXPECT_EQ(*io.ReadWholeFile("x"), "second");
  EXPECT_FALSE(io.Exists("x.tmp"));
  EXPECT_EQ(io.used_bytes(), 6);
}

TEST(FakeFileIoTest, FullDisk) {
  FakeFileIo io;
  io.set_capacity_bytes(100);
  absl::Status s = io.OpenForReadWrite("big", 101).status();
  EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_NE(s.message().find("big"), std::string::npos);
  EXPECT_NE(s.message().find("No space"), std::string::npos);
  EXPECT_FALSE(io.Exists("big"));
  auto file = OpenFileOrDie(io, "ok", 60);
  // Overwrites inside the preallocated size fit; growing past capacity does not.
  EXPECT_TRUE(file->Pwrite(0, "abc", 3).ok());
  EXPECT_TRUE(IsIoError(io.WriteFileAtomically("idx", std::string(41, 'x'))));
  EXPECT_TRUE(io.WriteFileAtomically("idx", std::string(40, 'x')).ok());
  EXPECT_TRUE(IsIoError(file->Pwrite(99, "z", 1)));
  // The disk filled up behind our back: every write fails.
  io.set_capacity_bytes(50);
  EXPECT_TRUE(IsIoError(file->Pwrite(0, "abc", 3)));
  EXPECT_EQ(io.fault_counters().no_space, 4);
  io.set_capacity_bytes(std::nullopt);
  EXPECT_TRUE(file->Pwrite(0, "abc", 3).ok());
}

TEST(FakeFileIoTest, InjectedWriteFaults) {
  FakeFileIo io;
  auto file = OpenFileOrDie(io, "f", 16);
  io.FailNextWrites(2);
  EXPECT_TRUE(IsIoError(file->Pwrite(0, "abcd", 4)));
  EXPECT_TRUE(IsIoError(io.WriteFileAtomically("g", "x")));
  EXPECT_FALSE(io.Exists("g"));
  EXPECT_TRUE(file->Pwrite(0, "abcd", 4).ok());

  io.ShortWriteNext(2);
  EXPECT_TRUE(IsIoError(file->Pwrite(4, "WXYZ", 4)));
  io.TornWriteNext(1);
  EXPECT_TRUE(file->Pwrite(8, "QRST", 4).ok());
  EXPECT_EQ(io.Contents("f")->substr(0, 12), std::string("abcdWX\0\0Q\0\0\0", 12));

  io.FailNextSyncs(1);
  EXPECT_TRUE(IsIoError(file->Sync()));
  EXPECT_TRUE(file->Sync().ok());

  const FakeFileIo::FaultCounters c = io.fault_counters();
  EXPECT_EQ(c.failed_writes, 2);
  EXPECT_EQ(c.short_writes, 1);
  EXPECT_EQ(c.torn_writes, 1);
  EXPECT_EQ(c.failed_syncs, 1);
}

TEST(FakeFileIoTest, InjectedReadFaultsFlipsAndTruncation) {
  FakeFileIo io;
  auto file = OpenFileOrDie(io, "f", 4);
  ASSERT_TRUE(file->Pwrite(0, "\x01\x02\x03\x04", 4).ok());
  io.FailNextReads(1);
  char buf[4];
  EXPECT_TRUE(IsIoError(file->Pread(0, 4, buf)));
  ASSERT_TRUE(file->Pread(0, 4, buf).ok());

  ASSERT_TRUE(io.FlipBit("f", 2, 7).ok());
  ASSERT_TRUE(file->Pread(0, 4, buf).ok());
  EXPECT_EQ(static_cast<uint8_t>(buf[2]), 0x83);
  EXPECT_TRUE(absl::IsOutOfRange(io.FlipBit("f", 4, 0)));
  EXPECT_TRUE(absl::IsNotFound(io.FlipBit("nope", 0, 0)));

  ASSERT_TRUE(io.Truncate("f", 2).ok());
  EXPECT_EQ(*file->Size(), 2);
  EXPECT_TRUE(IsIoError(file->Pread(0, 4, buf)));
  EXPECT_EQ(io.used_bytes(), 2);
  const FakeFileIo::FaultCounters c = io.fault_counters();
  EXPECT_EQ(c.failed_reads, 1);
  EXPECT_EQ(c.bit_flips, 1);
  EXPECT_EQ(c.truncations, 1);
}

}  // namespace
}  // namespace kvtier
