// DiskStoreCounters (disk_store_counters.h): the read clock and the snapshot.
#include "storage/disk_store_counters.h"

namespace kvtier {

namespace {

int64_t Nanos(Clock::TimePoint::duration time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time).count();
}

}  // namespace

// The times are taken under the lock, so that every read's own time lies within a period
// the read clock counts.
DiskStoreCounters::ReadTiming::ReadTiming(DiskStoreCounters* counters) : counters_(counters) {
  std::lock_guard<std::mutex> lock(counters_->read_clock_mu_);
  start_ = counters_->clock_->Now();
  if (counters_->reads_in_progress_++ == 0) counters_->reads_busy_since_ = start_;
}

DiskStoreCounters::ReadTiming::~ReadTiming() {
  std::lock_guard<std::mutex> lock(counters_->read_clock_mu_);
  const Clock::TimePoint end = counters_->clock_->Now();
  counters_->summed_read_nanos_ += Nanos(end - start_);
  if (--counters_->reads_in_progress_ == 0) counters_->read_nanos_ += Nanos(end - counters_->reads_busy_since_);
}

void DiskStoreCounters::AddFileReadTime(Clock::TimePoint::duration time) {
  file_read_nanos_.fetch_add(Nanos(time), std::memory_order_relaxed);
}

DiskStoreCounts DiskStoreCounters::Snapshot() const {
  DiskStoreCounts c;
  c.writes = writes.load(std::memory_order_relaxed);
  c.reads = reads.load(std::memory_order_relaxed);
  c.bytes_written = bytes_written.load(std::memory_order_relaxed);
  c.bytes_read = bytes_read.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(read_clock_mu_);
    int64_t nanos = read_nanos_;
    if (reads_in_progress_ > 0) {
      const auto busy = clock_->Now() - reads_busy_since_;
      nanos += std::chrono::duration_cast<std::chrono::nanoseconds>(busy).count();
    }
    c.read_seconds = static_cast<double>(nanos) * 1e-9;
    c.read_seconds_summed = static_cast<double>(summed_read_nanos_) * 1e-9;
  }
  c.file_read_seconds_summed = static_cast<double>(file_read_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  c.corrupt_detected = corrupt_detected.load(std::memory_order_relaxed);
  c.stale_detected = stale_detected.load(std::memory_order_relaxed);
  c.token_mismatches = token_mismatches.load(std::memory_order_relaxed);
  c.io_errors = io_errors.load(std::memory_order_relaxed);
  c.index_ignored = index_ignored.load(std::memory_order_relaxed);
  c.journal_records = journal_records.load(std::memory_order_relaxed);
  c.compactions = compactions.load(std::memory_order_relaxed);
  c.journal_replayed = journal_replayed;
  c.slots_scanned = slots_scanned;
  c.older_format_slots = older_format_slots;
  return c;
}

}  // namespace kvtier
