#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/errors.h"
#include "storage/file_io.h"
#include "temp_dir.h"

namespace kvtier {
namespace {

using ::kvtier::testing::StorageTempDir;

TEST(PosixFileIoTest, OpenPreallocatesAndRoundTrips) {
  StorageTempDir dir;
  FileIo* io = DefaultFileIo();
  const std::string path = dir.File("slots");
  EXPECT_FALSE(io->Exists(path));
  auto file = io->OpenForReadWrite(path, 8192);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(io->Exists(path));
  EXPECT_EQ(*(*file)->Size(), 8192);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GE(st.st_blocks * 512, 8192) << "space is reserved, not sparse";
  ASSERT_TRUE((*file)->Pwrite(4000, "payload", 7).ok());
  ASSERT_TRUE((*file)->Sync().ok());
  char buf[7];
  ASSERT_TRUE((*file)->Pread(4000, 7, buf).ok());
  EXPECT_EQ(std::string(buf, 7), "payload");
  absl::Status past_end = (*file)->Pread(8190, 7, buf);
  EXPECT_TRUE(IsIoError(past_end)) << past_end;
  // Open, the file is locked against other opens, in this process too.
  absl::Status locked = io->OpenForReadWrite(path, 16384).status();
  EXPECT_TRUE(absl::IsUnavailable(locked)) << locked;
  EXPECT_NE(locked.message().find(path), std::string::npos) << locked;
  EXPECT_EQ(*(*file)->Size(), 8192) << "a refused open changed the file";
  file->reset();
  // Reopening with a smaller size keeps the file and its bytes.
  auto again = io->OpenForReadWrite(path, 10);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*(*again)->Size(), 8192);
  ASSERT_TRUE((*again)->Pread(4000, 7, buf).ok());
  EXPECT_EQ(std::string(buf, 7), "payload");
}

TEST(PosixFileIoTest, ErrorsNameThePath) {
  FileIo* io = DefaultFileIo();
  StorageTempDir dir;
  const std::string missing_dir = dir.File("no/such/dir/slots");
  absl::Status s = io->OpenForReadWrite(missing_dir, 10).status();
  EXPECT_TRUE(IsIoError(s)) << s;
  EXPECT_NE(s.message().find(missing_dir), std::string::npos);
  EXPECT_TRUE(absl::IsNotFound(io->ReadWholeFile(dir.File("absent")).status()));
  EXPECT_TRUE(IsIoError(io->WriteFileAtomically(missing_dir, "x")));
}

TEST(PosixFileIoTest, WriteFileAtomicallyReplaces) {
  StorageTempDir dir;
  FileIo* io = DefaultFileIo();
  const std::string path = dir.File("index");
  ASSERT_TRUE(io->WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(io->WriteFileAtomically(path, std::string(100000, 'z')).ok());
  EXPECT_EQ(*io->ReadWholeFile(path), std::string(100000, 'z'));
  EXPECT_FALSE(io->Exists(path + ".tmp"));
}

}  // namespace
}  // namespace kvtier
