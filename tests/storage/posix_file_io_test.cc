#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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

// PreadDirect returns the bytes Pread does: from the page cache (just written), from the
// device (the file's pages dropped), for unaligned arguments (a buffered read), and past
// the end it fails as Pread does.
TEST(PosixFileIoTest, PreadDirectReadsWhatPreadReads) {
  StorageTempDir dir;
  constexpr size_t kAlign = RandomAccessFile::kDirectReadAlignment;
  const std::string path = dir.File("slots");
  auto file = DefaultFileIo()->OpenForReadWrite(path, 64 * kAlign);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<uint8_t> data(16 * kAlign);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  ASSERT_TRUE((*file)->Pwrite(8 * kAlign, data.data(), data.size()).ok());
  ASSERT_TRUE((*file)->Sync().ok());
  auto aligned = [&] {
    return std::unique_ptr<uint8_t, decltype(&std::free)>(
        static_cast<uint8_t*>(std::aligned_alloc(kAlign, data.size() + kAlign)), &std::free);
  };
  auto out = aligned();
  ASSERT_TRUE((*file)->PreadDirect(8 * kAlign, data.size(), out.get()).ok());
  EXPECT_EQ(std::memcmp(out.get(), data.data(), data.size()), 0) << "from the page cache";
  // The pages dropped: read from the device (O_DIRECT where the file system has it).
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  std::memset(out.get(), 0, data.size());
  ASSERT_TRUE((*file)->PreadDirect(8 * kAlign, data.size(), out.get()).ok());
  EXPECT_EQ(std::memcmp(out.get(), data.data(), data.size()), 0) << "from the device";
  // Unaligned offset, size and buffer: a buffered read.
  ASSERT_TRUE((*file)->PreadDirect(8 * kAlign + 3, 1000, out.get() + 1).ok());
  EXPECT_EQ(std::memcmp(out.get() + 1, data.data() + 3, 1000), 0) << "unaligned";
  absl::Status past_end = (*file)->PreadDirect(63 * kAlign, 2 * kAlign, out.get());
  EXPECT_TRUE(IsIoError(past_end)) << past_end;
  EXPECT_NE(past_end.message().find(path), std::string::npos) << past_end;
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
