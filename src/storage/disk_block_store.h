// DiskBlockStore: the disk tier — one preallocated file of fixed-size slots, each holding one
// KV block behind a checksummed header, plus an index file that survives restarts.
// Thread-safe: Write/Read of different slots may run concurrently (positioned I/O); the caller
// must not Read or Write a slot while another call Writes it. SaveIndex calls are serialised.
#ifndef KVTIER_STORAGE_DISK_BLOCK_STORE_H_
#define KVTIER_STORAGE_DISK_BLOCK_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/disk_index.h"
#include "storage/file_io.h"

namespace kvtier {

struct DiskStoreOptions {
  std::string path;           // the slot file; the index is path + ".index"
  int64_t num_slots = 0;      // > 0
  size_t block_bytes = 0;     // > 0: bytes of one KV block (all layers)
  uint64_t model_fingerprint = 0;
  int64_t block_tokens = 0;   // tokens per block; token counts are checked against it when > 0
  FileIo* io = nullptr;       // nullptr = DefaultFileIo(); must outlive the store
  // Slots whose space Open reserves before it returns; nullopt = all of them. The caller
  // reserves the others with PreallocateSlots before it uses them (the KV manager does it
  // on a background thread, so that a large file does not hold up context creation).
  std::optional<int64_t> slots_reserved_at_open;
};

// Slot layout: slot i starts at i * slot_bytes() (a multiple of 4096); its first
// kSlotHeaderBytes hold the header {magic, format version, model fingerprint, block hash,
// block bytes, slot index, token count, payload CRC32C, header CRC32C}, the block's bytes
// follow. The header names its slot and model so that a misplaced or foreign slot is never
// taken for data; the CRCs catch torn writes and bit rot. A slot is written payload first,
// header second, then synced; a crash in between leaves a header/payload mismatch that the
// CRC rejects.
class DiskBlockStore {
 public:
  static constexpr size_t kSlotHeaderBytes = 64;
  static constexpr size_t kSlotAlignment = 4096;

  struct Counters {
    int64_t writes = 0;            // successful Writes
    int64_t reads = 0;             // successful Reads
    int64_t bytes_written = 0;     // block bytes of successful Writes
    int64_t bytes_read = 0;        // block bytes of successful Reads
    int64_t corrupt_detected = 0;  // Reads that returned DataLoss
    int64_t io_errors = 0;         // IoErrors of Write, Read, SaveIndex, and the index load
    int64_t index_ignored = 0;     // index files ignored at Open (corrupt or foreign)
  };

  // Creates/preallocates `path` (num_slots * slot_bytes(), or the slots_reserved_at_open
  // first slots of it) and loads `path + ".index"` if present. An index recorded for another geometry (num_slots, block_bytes, block_tokens) or
  // model fingerprint, or one that is truncated, corrupt or unreadable, is ignored — the store
  // starts empty and counts it in index_ignored — it never fails the open. InvalidArgument for
  // bad options; IoError when the file cannot be created or preallocated (full disk).
  static absl::StatusOr<std::unique_ptr<DiskBlockStore>> Open(const DiskStoreOptions& options);

  DiskBlockStore(const DiskBlockStore&) = delete;
  DiskBlockStore& operator=(const DiskBlockStore&) = delete;
  ~DiskBlockStore();

  int64_t num_slots() const { return geometry_.num_slots; }
  size_t block_bytes() const { return static_cast<size_t>(geometry_.block_bytes); }
  // Bytes one slot takes in the file (header + block, rounded up to kSlotAlignment).
  int64_t slot_bytes() const { return slot_bytes_; }
  static int64_t SlotBytes(size_t block_bytes) {
    return static_cast<int64_t>((kSlotHeaderBytes + block_bytes + kSlotAlignment - 1) / kSlotAlignment *
                                kSlotAlignment);
  }
  int64_t file_bytes() const { return slot_bytes_ * geometry_.num_slots; }
  const std::string& path() const { return path_; }
  std::string index_path() const { return path_ + ".index"; }

  // Slots the file had room for when Open returned (its size then, in whole slots): at
  // least slots_reserved_at_open, all of them for a file prepared by an earlier store.
  int64_t slots_in_file_at_open() const { return slots_in_file_at_open_; }
  // Reserves the space of slots [begin, end) in the file (posix_fallocate). Slots are
  // written only once reserved: then a full disk shows here, not as a failed block write.
  // Not synced: a slot's Write syncs what reading it back needs. May run concurrently with
  // Read and Write of other slots. IoError when the disk is full; InvalidArgument for a bad
  // range.
  absl::Status PreallocateSlots(int64_t begin, int64_t end);

  // Writes block_bytes() bytes of `data` into `slot` with its header and makes them durable
  // (Sync) before returning. IoError on failure: the slot's content is then undefined (a later
  // Read reports DataLoss or the old block). InvalidArgument for a bad slot or token count.
  absl::Status Write(int64_t slot, uint64_t block_hash, int32_t token_count, const void* data);

  // Reads `slot` into out (block_bytes() bytes) and verifies magic, version, model
  // fingerprint, slot, block size, hash == expected_hash and both CRCs. DataLoss
  // ("slot N: ...") when anything does not match — the caller treats it as a miss and
  // recomputes; IoError when the read itself fails. out's bytes are unspecified on error.
  absl::Status Read(int64_t slot, uint64_t expected_hash, void* out);

  // The entries of the index found at Open (empty when none or ignored): what survived.
  const std::vector<DiskIndexEntry>& recovered_entries() const { return recovered_; }
  // Why the index was ignored at Open (empty when it was used or absent), for logs.
  const std::string& index_ignored_reason() const { return index_ignored_reason_; }

  // Persists the mapping slot -> (hash, token_count) atomically (write-new-then-rename) to
  // index_path(). InvalidArgument for entries out of range or repeating a slot; IoError when
  // writing fails (the previous index then stays in place).
  absl::Status SaveIndex(const std::vector<DiskIndexEntry>& entries);

  Counters counters() const;

 private:
  DiskBlockStore(std::string path, const DiskGeometry& geometry, FileIo* io,
                 std::unique_ptr<RandomAccessFile> file);

  absl::Status CheckSlot(int64_t slot) const;
  void LoadIndex();
  // Counts an IoError result and passes any status through.
  absl::Status CountIo(absl::Status status);

  const std::string path_;
  const DiskGeometry geometry_;
  const int64_t slot_bytes_;
  FileIo* const io_;
  const std::unique_ptr<RandomAccessFile> file_;
  int64_t slots_in_file_at_open_ = 0;      // set in Open, then immutable
  std::vector<DiskIndexEntry> recovered_;  // set in Open, then immutable
  std::string index_ignored_reason_;       // set in Open, then immutable
  absl::Mutex index_mu_;                   // serialises SaveIndex (one .tmp file)

  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> reads_{0};
  std::atomic<int64_t> bytes_written_{0};
  std::atomic<int64_t> bytes_read_{0};
  std::atomic<int64_t> corrupt_detected_{0};
  std::atomic<int64_t> io_errors_{0};
  std::atomic<int64_t> index_ignored_{0};
};

}  // namespace kvtier

#endif  // KVTIER_STORAGE_DISK_BLOCK_STORE_H_
