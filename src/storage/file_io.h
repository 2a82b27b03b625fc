// FileIo: the disk tier's only door to the file system (LevelDB Env-style), so that full
// disks, short writes, EIO and bit flips can be injected deterministically (FakeFileIo, in
// tests/testing).
// Implementations must be thread-safe; a RandomAccessFile may be used from several threads
// at once (positioned I/O, no shared offset).
#ifndef KVTIER_STORAGE_FILE_IO_H_
#define KVTIER_STORAGE_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier {

// An open file read and written at explicit offsets. Every failure is an IoError (absl
// kUnknown) naming the file, except where noted.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile();
  // Reads exactly n bytes at offset into out; fewer (end of file) is an IoError.
  virtual absl::Status Pread(int64_t offset, size_t n, void* out) = 0;
  // Pread bypassing the page cache (O_DIRECT) where the file system allows, for offset, n
  // and out that are multiples of kDirectReadAlignment; otherwise, and for files that cannot
  // (this default, file systems without O_DIRECT), Pread.
  static constexpr size_t kDirectReadAlignment = 4096;
  virtual absl::Status PreadDirect(int64_t offset, size_t n, void* out) { return Pread(offset, n, out); }
  // Writes exactly n bytes at offset; a short write is an IoError (some bytes may be written).
  virtual absl::Status Pwrite(int64_t offset, const void* data, size_t n) = 0;
  // Makes the data written so far durable (fdatasync).
  virtual absl::Status Sync() = 0;
  // Reserves space for [offset, offset + n) (posix_fallocate), growing the file when it ends
  // before; bytes already there are kept. A full disk is an IoError naming the path and the
  // range. May run while other threads read and write other ranges of the file.
  virtual absl::Status Allocate(int64_t offset, int64_t n) = 0;
  virtual absl::StatusOr<int64_t> Size() = 0;
};

class FileIo {
 public:
  virtual ~FileIo();
  // Opens `path` for reading and writing, creating it if missing, and makes sure it is at least
  // `size` bytes with the space reserved (posix_fallocate): a full disk is an IoError naming
  // the path and the size, and a file created by this call is removed again then.
  // The returned file holds an exclusive lock on `path` until it is destroyed: while it
  // lives, another open of the same file — from this process or another — fails with
  // Unavailable (and changes nothing), so two owners never allocate the same slots.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(
      const std::string& path, int64_t size) = 0;
  // The most bytes a file at `path` could hold: the space free to this user on the file
  // system of its directory plus the file's current size (0 when missing). IoError when
  // the directory cannot be examined.
  virtual absl::StatusOr<int64_t> SpaceForFile(const std::string& path) = 0;
  // The whole file; NotFound when it does not exist, IoError when reading fails.
  virtual absl::StatusOr<std::string> ReadWholeFile(const std::string& path) = 0;
  // Write-new-then-rename: writes path + ".tmp", syncs it, renames it over `path`, syncs the
  // directory. After a crash `path` holds either the old or the new contents, never a mix.
  virtual absl::Status WriteFileAtomically(const std::string& path,
                                           const std::string& contents) = 0;
  virtual bool Exists(const std::string& path) = 0;
};

// The POSIX implementation. Stateless and thread-safe; lives for the whole process.
FileIo* DefaultFileIo();

}  // namespace kvtier

#endif  // KVTIER_STORAGE_FILE_IO_H_
