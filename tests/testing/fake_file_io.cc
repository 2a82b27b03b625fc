// FakeFileIo: in-memory files behind one mutex, with armed faults. Thread-safe.
#include "testing/fake_file_io.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errors.h"

namespace kvtier {

// An open fake file: the shared bytes plus the path it was opened under (for messages).
class FakeFileIo::File final : public RandomAccessFile {
 public:
  File(FakeFileIo* io, std::string path, Bytes bytes)
      : io_(io), path_(std::move(path)), bytes_(std::move(bytes)) {}
  ~File() override {
    std::lock_guard<std::mutex> lock(io_->mu_);
    io_->locked_.erase(path_);
  }

  absl::Status Pread(int64_t offset, size_t n, void* out) override {
    return io_->Pread(path_, bytes_, offset, n, out);
  }
  absl::Status Pwrite(int64_t offset, const void* data, size_t n) override {
    return io_->Pwrite(path_, bytes_, offset, data, n);
  }
  absl::Status Sync() override { return io_->Sync(path_); }
  absl::Status Allocate(int64_t offset, int64_t n) override { return io_->Allocate(path_, bytes_, offset, n); }
  absl::StatusOr<int64_t> Size() override {
    std::lock_guard<std::mutex> lock(io_->mu_);
    return static_cast<int64_t>(bytes_->size());
  }

 private:
  FakeFileIo* const io_;
  const std::string path_;
  const Bytes bytes_;
};

FakeFileIo::FakeFileIo() = default;
FakeFileIo::~FakeFileIo() = default;

absl::Status FakeFileIo::CheckSpace(const std::string& path, int64_t grow) {
  if (!capacity_.has_value()) return absl::OkStatus();
  const bool already_full = used_ > *capacity_;
  if (already_full || (grow > 0 && used_ + grow > *capacity_)) {
    ++counters_.no_space;
    return IoError(absl::StrCat("writing ", path, ": No space left on device (disk of ",
                                *capacity_, " bytes, ", used_, " used, ", std::max<int64_t>(grow, 0),
                                " more needed)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FakeFileIo::OpenForReadWrite(
    const std::string& path, int64_t size) {
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat("negative size for ", path));
  std::lock_guard<std::mutex> lock(mu_);
  if (locked_.contains(path)) {
    return absl::UnavailableError(absl::StrCat(path, " is in use by another kvtier context (in this process or another): a "
                                               "disk tier file serves one context at a time; give each context its own "
                                               "disk_path"));
  }
  auto it = files_.find(path);
  const int64_t old_size = it == files_.end() ? 0 : static_cast<int64_t>(it->second->size());
  if (size > old_size) {
    if (capacity_.has_value() && used_ + (size - old_size) > *capacity_) {
      ++counters_.no_space;
      return IoError(absl::StrCat("preallocating ", size, " bytes for ", path,
                                  ": No space left on device"));
    }
  }
  if (it == files_.end()) it = files_.emplace(path, std::make_shared<std::string>()).first;
  if (size > old_size) {
    it->second->resize(static_cast<size_t>(size), '\0');
    used_ += size - old_size;
  }
  locked_.insert(path);
  return std::unique_ptr<RandomAccessFile>(new File(this, path, it->second));
}

absl::StatusOr<int64_t> FakeFileIo::SpaceForFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  const int64_t size = it == files_.end() ? 0 : static_cast<int64_t>(it->second->size());
  if (!capacity_.has_value()) return int64_t{1} << 62;
  return std::max<int64_t>(0, *capacity_ - used_) + size;
}

absl::StatusOr<std::string> FakeFileIo::ReadWholeFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("opening ", path, ": no such file"));
  if (fail_reads_ > 0) {
    --fail_reads_;
    ++counters_.failed_reads;
    return IoError(absl::StrCat("reading ", path, ": Input/output error (injected)"));
  }
  return *it->second;
}

absl::Status FakeFileIo::WriteFileAtomically(const std::string& path,
                                             const std::string& contents) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string tmp = path + ".tmp";
  if (fail_writes_ > 0) {
    --fail_writes_;
    ++counters_.failed_writes;
    return IoError(absl::StrCat("writing ", tmp, ": Input/output error (injected)"));
  }
  // The new file exists next to the old one until the rename.
  auto tmp_it = files_.find(tmp);
  const int64_t old_tmp = tmp_it == files_.end() ? 0 : static_cast<int64_t>(tmp_it->second->size());
  if (absl::Status s = CheckSpace(tmp, static_cast<int64_t>(contents.size()) - old_tmp); !s.ok()) {
    return s;
  }
  if (fail_syncs_ > 0) {
    --fail_syncs_;
    ++counters_.failed_syncs;
    return IoError(absl::StrCat("syncing ", tmp, ": Input/output error (injected)"));
  }
  auto it = files_.find(path);
  if (it != files_.end()) {
    used_ -= static_cast<int64_t>(it->second->size());
    files_.erase(it);
  }
  if (tmp_it != files_.end()) {
    used_ -= old_tmp;
    files_.erase(tmp);
  }
  files_[path] = std::make_shared<std::string>(contents);
  used_ += static_cast<int64_t>(contents.size());
  return absl::OkStatus();
}

bool FakeFileIo::Exists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.contains(path);
}

absl::Status FakeFileIo::Pread(const std::string& path, const Bytes& bytes, int64_t offset,
                               size_t n, void* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_reads_ > 0) {
    --fail_reads_;
    ++counters_.failed_reads;
    return IoError(absl::StrCat("reading ", n, " bytes at ", offset, " from ", path,
                                ": Input/output error (injected)"));
  }
  const auto size = static_cast<int64_t>(bytes->size());
  if (offset < 0 || offset > size || static_cast<int64_t>(n) > size - offset) {
    return IoError(absl::StrCat("short read at ", offset, " from ", path, " (file of ", size,
                                " bytes, ", n, " wanted)"));
  }
  std::memcpy(out, bytes->data() + offset, n);
  return absl::OkStatus();
}

absl::Status FakeFileIo::Pwrite(const std::string& path, const Bytes& bytes, int64_t offset,
                                const void* data, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (offset < 0) return absl::InvalidArgumentError(absl::StrCat("negative offset for ", path));
  if (fail_writes_ > 0) {
    --fail_writes_;
    ++counters_.failed_writes;
    return IoError(absl::StrCat("writing ", n, " bytes at ", offset, " to ", path,
                                ": Input/output error (injected)"));
  }
  // Bytes held open by a file whose path was renamed over are not counted as used.
  auto it = files_.find(path);
  const bool counted = it != files_.end() && it->second == bytes;
  const auto old_size = static_cast<int64_t>(bytes->size());
  const int64_t full_end = offset + static_cast<int64_t>(n);
  if (absl::Status s = CheckSpace(path, counted ? full_end - old_size : 0); !s.ok()) return s;
  size_t to_write = n;
  absl::Status result;
  if (short_write_.has_value()) {
    to_write = std::min(n, *short_write_);
    short_write_.reset();
    ++counters_.short_writes;
    result = IoError(absl::StrCat("short write at ", offset, " to ", path, ": ", to_write,
                                  " of ", n, " bytes (injected)"));
  } else if (torn_write_.has_value()) {
    to_write = std::min(n, *torn_write_);
    torn_write_.reset();
    ++counters_.torn_writes;
  }
  const int64_t grow = offset + static_cast<int64_t>(to_write) - old_size;
  if (grow > 0) {
    bytes->resize(static_cast<size_t>(old_size + grow), '\0');
    if (counted) used_ += grow;
  }
  std::memcpy(bytes->data() + offset, data, to_write);
  return result;
}

absl::Status FakeFileIo::Allocate(const std::string& path, const Bytes& bytes, int64_t offset, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (offset < 0 || n < 0) return absl::InvalidArgumentError(absl::StrCat("negative range for ", path));
  auto it = files_.find(path);
  const bool counted = it != files_.end() && it->second == bytes;
  const auto old_size = static_cast<int64_t>(bytes->size());
  const int64_t grow = offset + n - old_size;
  if (grow <= 0) return absl::OkStatus();
  if (counted && capacity_.has_value() && used_ + grow > *capacity_) {
    ++counters_.no_space;
    return IoError(absl::StrCat("preallocating ", n, " bytes at ", offset, " for ", path,
                                ": No space left on device"));
  }
  bytes->resize(static_cast<size_t>(old_size + grow), '\0');
  if (counted) used_ += grow;
  return absl::OkStatus();
}

absl::Status FakeFileIo::Sync(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_syncs_ > 0) {
    --fail_syncs_;
    ++counters_.failed_syncs;
    return IoError(absl::StrCat("syncing ", path, ": Input/output error (injected)"));
  }
  return absl::OkStatus();
}

void FakeFileIo::set_capacity_bytes(std::optional<int64_t> capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity;
}
void FakeFileIo::FailNextWrites(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_writes_ = n;
}
void FakeFileIo::ShortWriteNext(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  short_write_ = n;
}
void FakeFileIo::TornWriteNext(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  torn_write_ = n;
}
void FakeFileIo::FailNextReads(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_reads_ = n;
}
void FakeFileIo::FailNextSyncs(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_syncs_ = n;
}

absl::Status FakeFileIo::FlipBit(const std::string& path, int64_t byte_offset, int bit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
  if (byte_offset < 0 || byte_offset >= static_cast<int64_t>(it->second->size()) || bit < 0 ||
      bit > 7) {
    return absl::OutOfRangeError(absl::StrCat("no bit ", bit, " of byte ", byte_offset, " in ",
                                              path, " (", it->second->size(), " bytes)"));
  }
  (*it->second)[static_cast<size_t>(byte_offset)] ^= static_cast<char>(1u << bit);
  ++counters_.bit_flips;
  return absl::OkStatus();
}

absl::Status FakeFileIo::Overwrite(const std::string& path, int64_t offset, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
  if (offset < 0 || offset + static_cast<int64_t>(bytes.size()) > static_cast<int64_t>(it->second->size())) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + static_cast<int64_t>(bytes.size()),
                                              ") are not all in ", path, " (", it->second->size(), " bytes)"));
  }
  it->second->replace(static_cast<size_t>(offset), bytes.size(), bytes);
  return absl::OkStatus();
}

absl::Status FakeFileIo::Truncate(const std::string& path, int64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
  if (size < 0) return absl::InvalidArgumentError("negative size");
  used_ += size - static_cast<int64_t>(it->second->size());
  it->second->resize(static_cast<size_t>(size), '\0');
  ++counters_.truncations;
  return absl::OkStatus();
}

absl::StatusOr<std::string> FakeFileIo::Contents(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
  return *it->second;
}

int64_t FakeFileIo::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

FakeFileIo::FaultCounters FakeFileIo::fault_counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace kvtier
