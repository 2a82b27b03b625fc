// POSIX FileIo: pread/pwrite/fdatasync on one descriptor per open file. Stateless;
// thread-safe (positioned I/O shares no offset).
#include "storage/file_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errors.h"

namespace kvtier {

RandomAccessFile::~RandomAccessFile() = default;
FileIo::~FileIo() = default;

namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path, int err) {
  if (err == ENOENT) return absl::NotFoundError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
  return IoError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status SyncDirectoryOf(const std::string& path) {
  const std::string dir = DirName(path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("opening directory", dir, errno);
  absl::Status status;
  if (::fsync(fd) != 0) status = ErrnoError("syncing directory", dir, errno);
  ::close(fd);
  return status;
}

// Writes all n bytes at offset (retrying partial writes and EINTR).
absl::Status PwriteAll(int fd, const std::string& path, int64_t offset, const void* data,
                       size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (done < 0) {
      if (errno == EINTR) continue;
      return IoError(absl::StrCat("writing ", n, " bytes at ", offset, " to ", path, ": ",
                                  std::strerror(errno)));
    }
    if (done == 0) {
      return IoError(absl::StrCat("short write at ", offset, " to ", path));
    }
    p += done;
    offset += done;
    n -= static_cast<size_t>(done);
  }
  return absl::OkStatus();
}

class PosixFile final : public RandomAccessFile {
 public:
  // direct_fd: the same file opened with O_DIRECT for PreadDirect, or -1 (not supported).
  PosixFile(int fd, int direct_fd, std::string path) : fd_(fd), direct_fd_(direct_fd), path_(std::move(path)) {}
  ~PosixFile() override {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }

  absl::Status PreadDirect(int64_t offset, size_t n, void* out) override {
    const size_t align = kDirectReadAlignment;
    if (direct_fd_ < 0 || offset % static_cast<int64_t>(align) != 0 || n % align != 0 ||
        reinterpret_cast<uintptr_t>(out) % align != 0) {
      return Pread(offset, n, out);
    }
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t done = ::pread(direct_fd_, p, n, static_cast<off_t>(offset));
      if (done < 0 && errno == EINTR) continue;
      // Refused (EINVAL: this file system's alignment is coarser), or a short read that left
      // the rest unaligned: the buffered read finishes it (and names any real error).
      if (done <= 0 || static_cast<size_t>(done) % align != 0) return Pread(offset, n, p);
      p += done;
      offset += done;
      n -= static_cast<size_t>(done);
    }
    return absl::OkStatus();
  }

  absl::Status Pread(int64_t offset, size_t n, void* out) override {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t done = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (done < 0) {
        if (errno == EINTR) continue;
        return IoError(absl::StrCat("reading ", n, " bytes at ", offset, " from ", path_, ": ",
                                    std::strerror(errno)));
      }
      if (done == 0) {
        return IoError(absl::StrCat("short read at ", offset, " from ", path_,
                                    " (end of file, ", n, " bytes missing)"));
      }
      p += done;
      offset += done;
      n -= static_cast<size_t>(done);
    }
    return absl::OkStatus();
  }

  absl::Status Pwrite(int64_t offset, const void* data, size_t n) override {
    return PwriteAll(fd_, path_, offset, data, n);
  }

  absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoError("syncing", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Allocate(int64_t offset, int64_t n) override {
    if (offset < 0 || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative range ", offset, "+", n, " for ", path_));
    }
    if (n == 0) return absl::OkStatus();
    // posix_fallocate returns the error number instead of setting errno.
    const int err = ::posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(n));
    if (err != 0) {
      return IoError(absl::StrCat("preallocating ", n, " bytes at ", offset, " for ", path_, ": ",
                                  std::strerror(err)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoError("stat of", path_, errno);
    return static_cast<int64_t>(st.st_size);
  }

 private:
  const int fd_;
  const int direct_fd_;
  const std::string path_;
};

class PosixFileIo final : public FileIo {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path,
                                                                     int64_t size) override {
    if (size < 0) return absl::InvalidArgumentError(absl::StrCat("negative size for ", path));
    bool created = false;
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      created = fd >= 0;
      if (fd < 0 && errno == EEXIST) fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) return IoError(absl::StrCat("opening ", path, ": ", std::strerror(errno)));
    // A second descriptor for PreadDirect; file systems without O_DIRECT (tmpfs) refuse it.
    const int direct_fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    auto file = std::make_unique<PosixFile>(fd, direct_fd, path);
    auto fail = [&](absl::Status status) {
      file.reset();
      if (created) ::unlink(path.c_str());
      return status;
    };
    // flock, not fcntl: its lock belongs to the open file description, so a second open in
    // the same process conflicts too (a POSIX record lock would be shared by the process).
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        return fail(absl::UnavailableError(absl::StrCat(
            path, " is in use by another kvtier context (in this process or another): a disk tier file serves one "
                  "context at a time; give each context its own disk_path")));
      }
      return fail(ErrnoError("locking", path, errno));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) return fail(ErrnoError("stat of", path, errno));
    if (st.st_size < size) {
      // posix_fallocate returns the error number instead of setting errno.
      const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
      if (err != 0) {
        return fail(IoError(absl::StrCat("preallocating ", size, " bytes for ", path, ": ",
                                         std::strerror(err))));
      }
      if (::fsync(fd) != 0) return fail(ErrnoError("syncing", path, errno));
    }
    if (created) {
      absl::Status status = SyncDirectoryOf(path);
      if (!status.ok()) return fail(std::move(status));
    }
    return std::unique_ptr<RandomAccessFile>(std::move(file));
  }

  absl::StatusOr<int64_t> SpaceForFile(const std::string& path) override {
    const std::string dir = DirName(path);
    struct statvfs fs;
    if (::statvfs(dir.c_str(), &fs) != 0) return ErrnoError("examining the file system of", dir, errno);
    int64_t space = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) space += static_cast<int64_t>(st.st_size);
    return space;
  }

  absl::StatusOr<std::string> ReadWholeFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("opening", path, errno);
    std::string contents;
    char buffer[1 << 16];
    while (true) {
      const ssize_t done = ::read(fd, buffer, sizeof(buffer));
      if (done < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        return IoError(absl::StrCat("reading ", path, ": ", std::strerror(err)));
      }
      if (done == 0) break;
      contents.append(buffer, static_cast<size_t>(done));
    }
    ::close(fd);
    return contents;
  }

  absl::Status WriteFileAtomically(const std::string& path,
                                   const std::string& contents) override {
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return IoError(absl::StrCat("creating ", tmp, ": ", std::strerror(errno)));
    absl::Status status = PwriteAll(fd, tmp, 0, contents.data(), contents.size());
    if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("syncing", tmp, errno);
    if (::close(fd) != 0 && status.ok()) status = ErrnoError("closing", tmp, errno);
    if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      status = IoError(absl::StrCat("renaming ", tmp, " to ", path, ": ", std::strerror(errno)));
    }
    if (!status.ok()) {
      ::unlink(tmp.c_str());
      return status;
    }
    return SyncDirectoryOf(path);
  }

  bool Exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
};

}  // namespace

FileIo* DefaultFileIo() {
  static FileIo* const io = new PosixFileIo();  // never destroyed: usable during exit
  return io;
}

}  // namespace kvtier
