// DiskStoreCounters: what a DiskBlockStore counts as it runs (atomics, bumped from any
// thread) and the read clock behind DiskStoreCounts::read_seconds; Snapshot() reads them
// all. Thread-safe.
#ifndef KVTIER_STORAGE_DISK_STORE_COUNTERS_H_
#define KVTIER_STORAGE_DISK_STORE_COUNTERS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"

namespace kvtier {

// A DiskBlockStore's counters at one moment (DiskBlockStore::counters()).
struct DiskStoreCounts {
  int64_t writes = 0;            // successful Writes
  int64_t reads = 0;             // successful Reads
  int64_t bytes_written = 0;     // block bytes of successful Writes
  int64_t bytes_read = 0;        // block bytes of successful Reads and ProbeReads
  // Wall-clock seconds during which at least one Read was in progress: bytes_read over it
  // is the bandwidth the tier delivered, however many Reads ran at once.
  double read_seconds = 0;
  // Each Read's and ProbeRead's own seconds, summed: over read_seconds, how many reads were
  // in flight on average while any was; over the reads, the time of one.
  double read_seconds_summed = 0;
  // Of those, the seconds in the file's reads (the rest: the header and payload checks and
  // the copy out, which take the CPU and memory, not the disk).
  double file_read_seconds_summed = 0;
  int64_t corrupt_detected = 0;  // Reads that returned DataLoss
  int64_t stale_detected = 0;    // Reads that found another block's valid header (NotFound)
  int64_t token_mismatches = 0;  // Reads that found the key with other tokens (FailedPrecondition)
  int64_t io_errors = 0;         // IoErrors of Write, Read, the journal and snapshots, the index load
  int64_t index_ignored = 0;     // index files or journals ignored at Open (corrupt, foreign, older)
  int64_t journal_records = 0;   // records appended since Open
  int64_t compactions = 0;       // snapshots written (Open, journal growth, Compact)
  int64_t recovered_blocks = 0;  // index entries found at Open
  int64_t journal_replayed = 0;  // journal records replayed at Open
  int64_t slots_scanned = 0;     // slot headers read at Open to rebuild a lost index
  int64_t older_format_slots = 0;  // of those, slots of an older format version (ignored)
};

class DiskStoreCounters {
 public:
  // Adds n to one of the running counters (relaxed: they order nothing).
  static void Add(std::atomic<int64_t>& counter, int64_t n = 1) { counter.fetch_add(n, std::memory_order_relaxed); }

  // Keeps the read clock running while it lives, and adds its lifetime to
  // read_seconds_summed: one per Read in progress.
  class ReadTiming {
   public:
    explicit ReadTiming(DiskStoreCounters* counters);
    ~ReadTiming();
    ReadTiming(const ReadTiming&) = delete;
    ReadTiming& operator=(const ReadTiming&) = delete;

   private:
    DiskStoreCounters* const counters_;
    Clock::TimePoint start_;
  };

  // The seconds of one file read of a Read (file_read_seconds_summed).
  void AddFileReadTime(Clock::TimePoint::duration time);
  Clock::TimePoint Now() const { return clock_->Now(); }

  // The read clock's time source (the steady clock unless set, before the store is shared).
  void set_clock(const Clock* clock) { clock_ = Clock::OrSteady(clock); }

  // Every counter; recovered_blocks is the caller's to fill (the store's recovered entries).
  DiskStoreCounts Snapshot() const;

  std::atomic<int64_t> writes{0};
  std::atomic<int64_t> reads{0};
  std::atomic<int64_t> bytes_written{0};
  std::atomic<int64_t> bytes_read{0};
  std::atomic<int64_t> corrupt_detected{0};
  std::atomic<int64_t> stale_detected{0};
  std::atomic<int64_t> token_mismatches{0};
  std::atomic<int64_t> io_errors{0};
  std::atomic<int64_t> index_ignored{0};
  std::atomic<int64_t> journal_records{0};
  std::atomic<int64_t> compactions{0};
  // Counted by Open alone, before the store is shared.
  int64_t journal_replayed = 0;
  int64_t slots_scanned = 0;
  int64_t older_format_slots = 0;

 private:
  const Clock* clock_ = Clock::Steady();
  mutable std::mutex read_clock_mu_;
  int reads_in_progress_ ABSL_GUARDED_BY(read_clock_mu_) = 0;
  Clock::TimePoint reads_busy_since_ ABSL_GUARDED_BY(read_clock_mu_);
  int64_t read_nanos_ ABSL_GUARDED_BY(read_clock_mu_) = 0;  // busy periods that ended
  int64_t summed_read_nanos_ ABSL_GUARDED_BY(read_clock_mu_) = 0;  // reads that ended
  std::atomic<int64_t> file_read_nanos_{0};
};

}  // namespace kvtier

#endif  // KVTIER_STORAGE_DISK_STORE_COUNTERS_H_
