// FileIoWrapper and RandomAccessFileWrapper: a FileIo (and its files) that forward every
// call to another, so a test's fault-injecting or instrumented FileIo overrides only the
// calls it changes (LevelDB's EnvWrapper). Thread-safety: the wrapped object's.
#ifndef KVTIER_TESTS_TESTING_FILE_IO_WRAPPER_H_
#define KVTIER_TESTS_TESTING_FILE_IO_WRAPPER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "storage/file_io.h"

namespace kvtier::testing {

class RandomAccessFileWrapper : public RandomAccessFile {
 public:
  explicit RandomAccessFileWrapper(std::unique_ptr<RandomAccessFile> inner) : inner_(std::move(inner)) {}
  absl::Status Pread(int64_t offset, size_t n, void* out) override { return inner_->Pread(offset, n, out); }
  absl::Status PreadDirect(int64_t offset, size_t n, void* out) override { return inner_->PreadDirect(offset, n, out); }
  absl::Status Pwrite(int64_t offset, const void* data, size_t n) override { return inner_->Pwrite(offset, data, n); }
  absl::Status Sync() override { return inner_->Sync(); }
  absl::Status Allocate(int64_t offset, int64_t n) override { return inner_->Allocate(offset, n); }
  absl::StatusOr<int64_t> Size() override { return inner_->Size(); }

 protected:
  RandomAccessFile* inner() { return inner_.get(); }

 private:
  std::unique_ptr<RandomAccessFile> inner_;
};

class FileIoWrapper : public FileIo {
 public:
  explicit FileIoWrapper(FileIo* inner) : inner_(inner) {}
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path, int64_t size) override {
    return inner_->OpenForReadWrite(path, size);
  }
  absl::StatusOr<int64_t> SpaceForFile(const std::string& path) override { return inner_->SpaceForFile(path); }
  absl::StatusOr<std::string> ReadWholeFile(const std::string& path) override { return inner_->ReadWholeFile(path); }
  absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) override {
    return inner_->WriteFileAtomically(path, contents);
  }
  bool Exists(const std::string& path) override { return inner_->Exists(path); }

 protected:
  FileIo* inner() { return inner_; }

 private:
  FileIo* inner_;
};

// Whether `path` ends with `suffix` (which of the disk tier's files a call is for: the slot
// file, its index, its journal).
inline bool PathEndsWith(const std::string& path, const std::string& suffix) {
  return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FILE_IO_WRAPPER_H_
