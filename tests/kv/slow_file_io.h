// A FileIo over FakeFileIo whose block payload writes and reads take a fixed delay (a slow
// disk), for the tests of the KV manager's disk I/O threads; it also counts the payload
// reads and writes, and the index writes (snapshots and journal appends), made on one
// watched thread (the stepping thread: they should be none while it steps).
// Thread-safe as FakeFileIo is.
#ifndef KVTIER_TESTS_KV_SLOW_FILE_IO_H_
#define KVTIER_TESTS_KV_SLOW_FILE_IO_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "storage/disk_block_store.h"
#include "testing/fake_file_io.h"
#include "testing/file_io_wrapper.h"
#include "storage/file_io.h"

namespace kvtier::testing {

class SlowFileIo final : public FileIoWrapper {
 public:
  SlowFileIo(FakeFileIo* inner, std::chrono::microseconds write_delay, std::chrono::microseconds read_delay)
      : FileIoWrapper(inner), write_delay_(write_delay), read_delay_(read_delay) {}
  // Payload I/O made on `thread` from now on is counted (files opened before included).
  void Watch(std::thread::id thread) { watched_->thread = thread; }
  int64_t payload_io_on_watched_thread() const { return watched_->count.load(); }
  int64_t index_writes_on_watched_thread() const { return watched_->index_writes.load(); }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path, int64_t size) override {
    auto file = inner()->OpenForReadWrite(path, size);
    if (!file.ok()) return file.status();
    const bool journal = PathEndsWith(path, ".journal");
    return std::unique_ptr<RandomAccessFile>(new File(std::move(*file), write_delay_, read_delay_, watched_, journal));
  }
  absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) override {
    if (std::this_thread::get_id() == watched_->thread) ++watched_->index_writes;
    return inner()->WriteFileAtomically(path, contents);
  }

 private:
  // Set before the engine's threads start (Watch), read after: no race on `thread`.
  struct Watched {
    std::thread::id thread;
    std::atomic<int64_t> count{0};         // block payload reads and writes
    std::atomic<int64_t> index_writes{0};  // snapshot writes and journal appends
  };
  class File final : public RandomAccessFileWrapper {
   public:
    File(std::unique_ptr<RandomAccessFile> inner, std::chrono::microseconds write_delay,
         std::chrono::microseconds read_delay, std::shared_ptr<Watched> watched, bool journal)
        : RandomAccessFileWrapper(std::move(inner)),
          write_delay_(write_delay),
          read_delay_(read_delay),
          watched_(std::move(watched)),
          journal_(journal) {}
    absl::Status Pread(int64_t offset, size_t n, void* out) override {
      if (IsPayload(offset)) Payload(read_delay_);
      return inner()->Pread(offset, n, out);
    }
    // The store's direct reads take a whole slot, its payload included, at once.
    absl::Status PreadDirect(int64_t offset, size_t n, void* out) override {
      if (!journal_) Payload(read_delay_);
      return inner()->Pread(offset, n, out);
    }
    absl::Status Pwrite(int64_t offset, const void* data, size_t n) override {
      if (journal_ && std::this_thread::get_id() == watched_->thread) ++watched_->index_writes;
      if (IsPayload(offset)) Payload(write_delay_);
      return inner()->Pwrite(offset, data, n);
    }

   private:
    // A slot's header starts it (aligned); its block payload follows the header. By offset,
    // not size: a test block may be as small as a header.
    bool IsPayload(int64_t offset) const {
      return !journal_ && offset % static_cast<int64_t>(DiskBlockStore::kSlotAlignment) != 0;
    }
    void Payload(std::chrono::microseconds delay) {
      if (std::this_thread::get_id() == watched_->thread) ++watched_->count;
      std::this_thread::sleep_for(delay);
    }
    std::chrono::microseconds write_delay_, read_delay_;
    std::shared_ptr<Watched> watched_;
    const bool journal_;  // the disk index's journal: no payload
  };
  std::chrono::microseconds write_delay_, read_delay_;
  std::shared_ptr<Watched> watched_ = std::make_shared<Watched>();
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_SLOW_FILE_IO_H_
