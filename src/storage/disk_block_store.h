// DiskBlockStore: the disk tier — one preallocated file of fixed-size slots, each holding one
// KV block behind a checksummed header (slot_header.h), plus an index that survives
// restarts and crashes: a snapshot (path + ".index", disk_index.h) continued by an
// append-only journal (path + ".journal", disk_journal.h).
// Thread-safe: Write/Read of different slots may run concurrently (positioned I/O); the caller
// must not Read or Write a slot while another call Writes it. Index updates (journal
// appends, compaction, Forget) are serialised by a mutex.
#ifndef KVTIER_STORAGE_DISK_BLOCK_STORE_H_
#define KVTIER_STORAGE_DISK_BLOCK_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sha256.h"
#include "storage/disk_index.h"
#include "storage/disk_journal.h"
#include "storage/disk_store_counters.h"
#include "storage/file_io.h"
#include "storage/slot_header.h"

namespace kvtier {

struct DiskStoreOptions {
  std::string path;           // the slot file; the index is path + ".index", its journal path + ".journal"
  int64_t num_slots = 0;      // > 0
  size_t block_bytes = 0;     // > 0: bytes of one KV block (all layers)
  uint64_t model_fingerprint = 0;
  int64_t block_tokens = 0;   // > 0: tokens per block (the most a slot header holds)
  FileIo* io = nullptr;       // nullptr = DefaultFileIo(); must outlive the store
  // Slots whose space Open reserves before it returns; nullopt = all of them. The caller
  // reserves the others with PreallocateSlots before it uses them (the KV manager does it
  // on a background thread, so that a large file does not hold up context creation).
  std::optional<int64_t> slots_reserved_at_open;
  // Reads bypass the page cache where the file system allows (RandomAccessFile::PreadDirect,
  // one read per slot). Off by default: on the H200 machine's virtio disk the reader
  // threads' direct reads delivered less than half of what buffered ones did (`kvtier bench`
  // W6c, load only).
  bool direct_reads = false;
  // The read clock's time source (read_seconds); nullptr = the steady clock. Must outlive
  // the store.
  const Clock* clock = nullptr;
};

// Slot layout: slot i starts at i * slot_bytes() (a multiple of 4096); its first
// header_bytes() hold the header (slot_header.h: format version, model fingerprint, block
// size, slot index, the block's key and tokens, payload CRC32C, header CRC32C), the block's
// bytes follow. The header names its slot, model, key and tokens so that a misplaced,
// foreign or stale slot is never taken for data; the CRCs catch torn writes and bit rot.
// A slot is written payload first, header second, then synced; a crash in between leaves a
// header/payload mismatch that the CRC rejects.
//
// Index: a block written as kCached content appends a record (slot, key) to the journal
// once the slot is synced, and syncs the record (so a block is found after a crash once
// Write returned). Snapshots list the entries in write order, oldest first, and so does
// recovered_entries(): a restart's eviction order continues the one before it. The journal is folded into a new snapshot at Open and whenever it has
// grown past twice the index (compaction; Compact at shutdown). At Open the snapshot is
// read and the records of its generation replayed, up to the first torn or invalid one.
// A snapshot that is missing or unreadable while the slot file existed is rebuilt by
// reading every slot's header (one header read per slot). An index or slot of an older
// format version, another model or another geometry is recognised and ignored — counted in
// index_ignored / older_format_slots, the reason in index_ignored_reason() — never
// trusted. Whatever the index says, every Read checks the slot's header against the key
// and tokens asked for and the payload against its CRC: an index entry can cost a miss,
// never a wrong block.
class DiskBlockStore {
 public:
  static constexpr size_t kSlotAlignment = 4096;

  // What a slot's content is to the index.
  enum class Content {
    kCached,      // a prefix-cache block: recorded in the index (found again after a restart)
    kPrivate,     // a swapped-out block: not recorded; the slot leaves the index
    kRecordOnly,  // WriteBatch only: the slot already holds this cached block (no data); its
                  // record is renewed, so a restart evicts it after the blocks written before
  };

  using Counters = DiskStoreCounts;

  // Creates/preallocates `path` (num_slots * slot_bytes(), or the slots_reserved_at_open
  // first slots of it) and recovers its index (see the class comment; a lost index is
  // rebuilt from the headers of the slots in the file); a lost, corrupt or foreign index
  // never fails the open. InvalidArgument for bad options; IoError when the file cannot be
  // created or preallocated (full disk).
  static absl::StatusOr<std::unique_ptr<DiskBlockStore>> Open(const DiskStoreOptions& options);

  DiskBlockStore(const DiskBlockStore&) = delete;
  DiskBlockStore& operator=(const DiskBlockStore&) = delete;
  ~DiskBlockStore();

  int64_t num_slots() const { return geometry_.num_slots; }
  size_t block_bytes() const { return static_cast<size_t>(geometry_.block_bytes); }
  int64_t block_tokens() const { return geometry_.block_tokens; }
  size_t header_bytes() const { return header_bytes_; }
  // Bytes one slot takes in the file (header + block, rounded up to kSlotAlignment).
  int64_t slot_bytes() const { return slot_bytes_; }
  static int64_t SlotBytes(size_t block_bytes, int64_t block_tokens) {
    return static_cast<int64_t>((SlotHeaderBytes(block_tokens) + block_bytes + kSlotAlignment - 1) /
                                kSlotAlignment * kSlotAlignment);
  }
  int64_t file_bytes() const { return slot_bytes_ * geometry_.num_slots; }
  const std::string& path() const { return path_; }
  std::string index_path() const { return path_ + ".index"; }
  std::string journal_path() const { return path_ + ".journal"; }

  // Slots the file had room for when Open returned (its size then, in whole slots): at
  // least slots_reserved_at_open, all of them for a file prepared by an earlier store.
  int64_t slots_in_file_at_open() const { return slots_in_file_at_open_; }
  // Reserves the space of slots [begin, end) in the file (posix_fallocate). Slots are
  // written only once reserved: then a full disk shows here, not as a failed block write.
  // Not synced: a slot's Write syncs what reading it back needs. May run concurrently with
  // Read and Write of other slots. IoError when the disk is full; InvalidArgument for a bad
  // range.
  absl::Status PreallocateSlots(int64_t begin, int64_t end);

  // Writes block_bytes() bytes of `data` into `slot` with its header (key, tokens) and makes
  // them durable (Sync); kCached content is then recorded in the journal (synced too)
  // before this returns. IoError when the slot could not be written: its content is then
  // undefined (a later Read reports DataLoss, NotFound or the old block). A failed journal
  // append is counted in io_errors, not returned: the block is written and readable, and
  // the next compaction records it. InvalidArgument for a bad slot or token count.
  absl::Status Write(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens, const void* data,
                     Content content);

  // Write for several slots at once (distinct, none being read meanwhile), with one sync of
  // the slot file and one journal append for all (group commit): each request's result, in
  // order. A failed sync fails every request it covered. A kRecordOnly request writes no
  // data: NotFound when the index does not hold its slot with its key (any more).
  struct WriteRequest {
    int64_t slot;
    Sha256Digest key;
    std::span<const int32_t> tokens;
    const void* data;
    Content content;
  };
  std::vector<absl::Status> WriteBatch(std::span<const WriteRequest> requests);

  // Reads `slot` into out (block_bytes() bytes) after checking its header: magic, version,
  // header CRC, model fingerprint, block size and slot (DataLoss "slot N: ..." when one
  // does not match: corrupt, foreign or torn), key (NotFound: the slot holds another
  // block, e.g. reused since the index entry was made), tokens (FailedPrecondition: the
  // same key with other tokens — refused, never used), then the payload CRC (DataLoss).
  // IoError when the read itself fails. out's bytes are unspecified on error.
  // With direct_reads (DiskStoreOptions), the slot is read whole in one
  // RandomAccessFile::PreadDirect into a buffer of the calling thread's, checked there and
  // copied out; otherwise the header and the payload are read (buffered) in two.
  absl::Status Read(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens, void* out);

  // Reads `slot`'s bytes as Read does, into a buffer of its own, without checking or
  // returning them: the store's read speed measured (bytes_read and read_seconds count it,
  // reads does not) before any block is needed, e.g. for a load plan's first split.
  absl::Status ProbeRead(int64_t slot);

  // The entries found at Open (snapshot + journal, or the slot scan), oldest written first
  // (by slot after a scan, which cannot tell).
  const std::vector<DiskIndexEntry>& recovered_entries() const { return recovered_; }
  // Why (part of) the index was ignored at Open (empty when none was), for logs.
  const std::string& index_ignored_reason() const { return index_ignored_reason_; }

  // Takes `slot` out of the index (its content is not to be found again, e.g. corrupt). No
  // I/O: the next snapshot leaves it out; until then a restart may find it and check it.
  void Forget(int64_t slot);
  // Writes a snapshot of the index and starts the journal over (also done at Open and as
  // the journal grows). IoError when the snapshot could not be written (the journal then
  // still holds the records).
  absl::Status Compact();

  DiskStoreCounts counters() const;

 private:
  DiskBlockStore(std::string path, const DiskGeometry& geometry, FileIo* io, std::unique_ptr<RandomAccessFile> file);

  absl::Status CheckSlot(int64_t slot) const;
  // Read's checks of a slot's header bytes (see Read); the payload CRC it names on success.
  absl::Status CheckHeader(int64_t slot, const Sha256Digest& key, std::span<const int32_t> tokens,
                           const uint8_t* header, uint32_t* payload_crc);
  absl::Status PayloadCorrupt(int64_t slot);  // counted, logged, DataLoss
  // The calling thread's buffer of one slot, aligned for PreadDirect.
  absl::StatusOr<uint8_t*> ThreadSlotBuffer() const;
  // Fills index_ from the snapshot and journal, or from the slot headers (see the class
  // comment); `existed`: the slot file was there before Open.
  void Recover(bool existed);
  void ScanSlots();
  void Ignore(const std::string& what, const absl::Status& status);
  absl::Status CompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(index_mu_);
  void Record(const DiskIndexEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(index_mu_);
  std::vector<DiskIndexEntry> IndexInWriteOrder() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(index_mu_);
  // Counts an IoError result and passes any status through.
  absl::Status CountIo(absl::Status status);
  // The file's bytes [offset, offset + n) into `out` (PreadDirect or Pread), timed
  // (file_read_seconds_summed) and counted by CountIo.
  absl::Status ReadFile(int64_t offset, size_t n, void* out, bool direct);

  const std::string path_;
  const DiskGeometry geometry_;
  bool direct_reads_ = false;  // DiskStoreOptions::direct_reads, set at Open
  const size_t header_bytes_;
  const int64_t slot_bytes_;
  FileIo* const io_;
  const std::unique_ptr<RandomAccessFile> file_;
  int64_t slots_in_file_at_open_ = 0;      // set in Open, then immutable
  std::vector<DiskIndexEntry> recovered_;  // set in Open, then immutable
  std::string index_ignored_reason_;       // set in Open, then immutable

  // std::mutex, not absl::Mutex: the system abseil is not built with ThreadSanitizer
  // annotations, and Write runs on the KV manager's I/O thread and, at shutdown, its owner.
  std::mutex index_mu_;
  // slot -> the key of its block, and when it was recorded (the index is kept in write
  // order, so that a restart evicts the oldest blocks first).
  struct IndexedBlock {
    Sha256Digest key;
    uint64_t order = 0;
  };
  absl::flat_hash_map<int64_t, IndexedBlock> index_ ABSL_GUARDED_BY(index_mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(index_mu_) = 0;
  std::unique_ptr<DiskJournal> journal_ ABSL_GUARDED_BY(index_mu_);  // null when it could not be opened
  uint64_t generation_ ABSL_GUARDED_BY(index_mu_) = 0;
  bool journal_current_ ABSL_GUARDED_BY(index_mu_) = false;  // every entry is in the snapshot or journal

  DiskStoreCounters counters_;
};

}  // namespace kvtier

#endif  // KVTIER_STORAGE_DISK_BLOCK_STORE_H_
