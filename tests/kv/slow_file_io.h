// A FileIo over FakeFileIo whose block payload writes and reads take a fixed delay (a slow
// disk), for the tests of the KV manager's disk I/O threads. Thread-safe as FakeFileIo is.
#ifndef KVTIER_TESTS_KV_SLOW_FILE_IO_H_
#define KVTIER_TESTS_KV_SLOW_FILE_IO_H_

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "storage/disk_block_store.h"
#include "storage/fake_file_io.h"
#include "storage/file_io.h"

namespace kvtier::testing {

class SlowFileIo final : public FileIo {
 public:
  SlowFileIo(FakeFileIo* inner, std::chrono::microseconds write_delay, std::chrono::microseconds read_delay)
      : inner_(inner), write_delay_(write_delay), read_delay_(read_delay) {}
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path, int64_t size) override {
    auto file = inner_->OpenForReadWrite(path, size);
    if (!file.ok()) return file.status();
    return std::unique_ptr<RandomAccessFile>(new File(std::move(*file), write_delay_, read_delay_));
  }
  absl::StatusOr<std::string> ReadWholeFile(const std::string& path) override { return inner_->ReadWholeFile(path); }
  absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) override {
    return inner_->WriteFileAtomically(path, contents);
  }
  bool Exists(const std::string& path) override { return inner_->Exists(path); }

 private:
  class File final : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> inner, std::chrono::microseconds write_delay,
         std::chrono::microseconds read_delay)
        : inner_(std::move(inner)), write_delay_(write_delay), read_delay_(read_delay) {}
    absl::Status Pread(int64_t offset, size_t n, void* out) override {
      if (IsPayload(offset)) std::this_thread::sleep_for(read_delay_);
      return inner_->Pread(offset, n, out);
    }
    absl::Status Pwrite(int64_t offset, const void* data, size_t n) override {
      if (IsPayload(offset)) std::this_thread::sleep_for(write_delay_);
      return inner_->Pwrite(offset, data, n);
    }
    absl::Status Sync() override { return inner_->Sync(); }
    absl::StatusOr<int64_t> Size() override { return inner_->Size(); }

   private:
    // A slot's header starts it (aligned); its block payload follows the header. By offset,
    // not size: a test block may be as small as a header.
    static bool IsPayload(int64_t offset) {
      return offset % static_cast<int64_t>(DiskBlockStore::kSlotAlignment) != 0;
    }
    std::unique_ptr<RandomAccessFile> inner_;
    std::chrono::microseconds write_delay_, read_delay_;
  };
  FakeFileIo* inner_;
  std::chrono::microseconds write_delay_, read_delay_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_SLOW_FILE_IO_H_
