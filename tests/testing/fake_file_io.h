// FakeFileIo: an in-memory FileIo (LevelDB memenv) with fault injection, so that every
// disk-tier failure — full disk, EIO, short and torn writes, bit flips, truncation — is tested
// deterministically. Test-only (tests/testing, the kvtier_testing library): the library
// itself never fakes its disk. Thread-safe (one mutex); files opened from it must not
// outlive it.
#ifndef KVTIER_TESTS_TESTING_FAKE_FILE_IO_H_
#define KVTIER_TESTS_TESTING_FAKE_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "storage/file_io.h"

namespace kvtier {

// Faults are armed by the knobs below and consumed by the next matching operations on any
// file, in call order. Files are shared strings: an open file keeps its bytes even when its
// path is renamed over (POSIX unlink semantics). Bytes never written read as zero. An open
// file locks its path as the POSIX one does (flock): a second open of it is Unavailable.
class FakeFileIo final : public FileIo {
 public:
  // How many faults of each kind were injected (armed faults not yet consumed do not count).
  struct FaultCounters {
    int64_t failed_writes = 0;
    int64_t short_writes = 0;
    int64_t torn_writes = 0;
    int64_t failed_reads = 0;
    int64_t failed_syncs = 0;
    int64_t no_space = 0;  // allocations or writes refused because the disk is full
    int64_t bit_flips = 0;
    int64_t truncations = 0;
  };

  FakeFileIo();
  ~FakeFileIo() override;
  FakeFileIo(const FakeFileIo&) = delete;
  FakeFileIo& operator=(const FakeFileIo&) = delete;

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path,
                                                                     int64_t size) override;
  absl::StatusOr<std::string> ReadWholeFile(const std::string& path) override;
  absl::Status WriteFileAtomically(const std::string& path,
                                   const std::string& contents) override;
  bool Exists(const std::string& path) override;
  // capacity - used + the file's size; a very large number when the capacity is unlimited.
  absl::StatusOr<int64_t> SpaceForFile(const std::string& path) override;

  // --- Fault knobs.
  // Total bytes the disk holds (sum of all file sizes); nullopt = unlimited (the default).
  // Preallocating or growing past it is ENOSPC. A capacity below what is already used means
  // the disk has filled up: every write fails with ENOSPC, as on a copy-on-write file system.
  void set_capacity_bytes(std::optional<int64_t> capacity);
  // The next n writes (Pwrite or WriteFileAtomically) fail with EIO and write nothing.
  void FailNextWrites(int n);
  // The next Pwrite writes only its first n bytes and returns an IoError.
  void ShortWriteNext(size_t n);
  // The next Pwrite writes only its first n bytes and reports success (a torn write that only
  // a checksum can catch).
  void TornWriteNext(size_t n);
  // The next n reads (Pread or ReadWholeFile) fail with EIO.
  void FailNextReads(int n);
  // The next n Syncs fail with EIO.
  void FailNextSyncs(int n);
  // Flips one bit of a file's stored bytes. NotFound / OutOfRange when there is no such byte.
  absl::Status FlipBit(const std::string& path, int64_t byte_offset, int bit);
  // Replaces a file's stored bytes at [offset, offset + bytes.size()), as another writer or
  // a misdirected write would, even while the file is open (and locked). OutOfRange past
  // the end, NotFound without the file.
  absl::Status Overwrite(const std::string& path, int64_t offset, std::string_view bytes);
  // Cuts (or zero-extends) a file to `size` bytes.
  absl::Status Truncate(const std::string& path, int64_t size);

  // --- Inspection.
  // A file's bytes, with no fault applied; NotFound when missing.
  absl::StatusOr<std::string> Contents(const std::string& path) const;
  int64_t used_bytes() const;
  FaultCounters fault_counters() const;

 private:
  class File;
  using Bytes = std::shared_ptr<std::string>;

  // OK when growing the disk by `grow` bytes (may be <= 0) fits; ENOSPC IoError otherwise.
  absl::Status CheckSpace(const std::string& path, int64_t grow)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Pread(const std::string& path, const Bytes& bytes, int64_t offset, size_t n,
                     void* out);
  absl::Status Pwrite(const std::string& path, const Bytes& bytes, int64_t offset,
                      const void* data, size_t n);
  absl::Status Sync(const std::string& path);
  // RandomAccessFile::Allocate: only the capacity can refuse it (ENOSPC); it consumes none
  // of the armed faults, which model writes, reads and syncs.
  absl::Status Allocate(const std::string& path, const Bytes& bytes, int64_t offset, int64_t n);

  // std::mutex, not absl::Mutex: the system abseil is not built with ThreadSanitizer
  // annotations, and this fake is used from the KV manager's disk I/O thread and the
  // stepping thread at once (the TSan CI job runs the soak test over it).
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Bytes> files_ ABSL_GUARDED_BY(mu_);
  // Paths an open File holds locked (OpenForReadWrite's exclusive lock).
  absl::flat_hash_set<std::string> locked_ ABSL_GUARDED_BY(mu_);
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;  // sum of sizes of the files in files_
  std::optional<int64_t> capacity_ ABSL_GUARDED_BY(mu_);
  int fail_writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<size_t> short_write_ ABSL_GUARDED_BY(mu_);
  std::optional<size_t> torn_write_ ABSL_GUARDED_BY(mu_);
  int fail_reads_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_syncs_ ABSL_GUARDED_BY(mu_) = 0;
  FaultCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_TESTS_TESTING_FAKE_FILE_IO_H_
