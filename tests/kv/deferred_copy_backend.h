// DeferredCopyBackend: wraps a backend so that StartCopiesToHost only records its copies;
// the bytes move when CopiesDone (from the `polls_before_done`-th poll of a ticket on) or
// WaitForCopies says the ticket is done, reading the device blocks as they are THEN. So a
// KV manager that reads a host slot (or writes it to disk) before the ticket is done sees
// stale bytes, and one that lets a forward overwrite a block still being copied copies
// the wrong bytes: either way the outputs differ from an unlimited-memory run.
// Like a copy stream, a host -> device copy from a host buffer with a deferred copy into it
// lands that copy first (FIFO). Not thread-safe (one stepping thread, like any Backend).
#ifndef KVTIER_TESTS_KV_DEFERRED_COPY_BACKEND_H_
#define KVTIER_TESTS_KV_DEFERRED_COPY_BACKEND_H_

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "testing/forwarding_backend.h"

namespace kvtier::testing {

class DeferredCopyBackend final : public ForwardingBackend {
 public:
  struct Counts {
    int64_t started_batches = 0;
    int64_t started_blocks = 0;
    int64_t polls_not_done = 0;  // CopiesDone answered false
    int64_t waits = 0;           // WaitForCopies on a ticket not yet done
  };

  explicit DeferredCopyBackend(std::unique_ptr<Backend> inner, int polls_before_done = 2)
      : ForwardingBackend(std::move(inner)), polls_before_done_(polls_before_done) {}

  // Host slots are copied to and from the device (and so deferred), never read in place.
  bool ReadsHostResidentKv() const override { return false; }
  absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) override {
    if (absl::Status s = LandCopiesInto(copies); !s.ok()) return s;
    return inner().CopyBlocksFromHost(copies);
  }
  absl::Status PrefetchBlocksFromHost(std::span<const BlockCopy> copies) override {
    if (absl::Status s = LandCopiesInto(copies); !s.ok()) return s;
    return inner().PrefetchBlocksFromHost(copies);
  }

  absl::StatusOr<int64_t> StartCopiesToHost(std::span<const BlockCopy> copies) override {
    for (const BlockCopy& c : copies) {
      if (c.device_block < 0 || c.device_block >= num_kv_blocks()) {
        return absl::InvalidArgumentError(absl::StrCat("block ", c.device_block, " out of range"));
      }
    }
    const int64_t ticket = next_ticket_++;
    pending_.push_back({ticket, std::vector<BlockCopy>(copies.begin(), copies.end()), 0});
    ++counts_.started_batches;
    counts_.started_blocks += static_cast<int64_t>(copies.size());
    return ticket;
  }
  absl::StatusOr<bool> CopiesDone(int64_t ticket) override {
    if (ticket <= 0 || ticket >= next_ticket_) return absl::InvalidArgumentError("unknown ticket");
    if (ticket <= done_through_) return true;
    Pending* p = Find(ticket);
    if (++p->polls < polls_before_done_) {
      ++counts_.polls_not_done;
      return false;
    }
    if (absl::Status s = LandThrough(ticket); !s.ok()) return s;
    return true;
  }
  absl::Status WaitForCopies(int64_t ticket) override {
    if (ticket <= 0 || ticket >= next_ticket_) return absl::InvalidArgumentError("unknown ticket");
    if (ticket <= done_through_) return absl::OkStatus();
    ++counts_.waits;
    return LandThrough(ticket);
  }

  const Counts& counts() const { return counts_; }
  int64_t num_pending() const { return static_cast<int64_t>(pending_.size()); }

 private:
  struct Pending {
    int64_t ticket;
    std::vector<BlockCopy> copies;
    int polls;
  };
  Pending* Find(int64_t ticket) {
    for (Pending& p : pending_) {
      if (p.ticket == ticket) return &p;
    }
    return nullptr;
  }
  // Tickets complete in order: landing one lands every earlier one.
  absl::Status LandThrough(int64_t ticket) {
    while (!pending_.empty() && pending_.front().ticket <= ticket) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      if (absl::Status s = inner().CopyBlocksToHost(p.copies); !s.ok()) return s;
      done_through_ = p.ticket;
    }
    return absl::OkStatus();
  }
  // FIFO with later host -> device copies reading a host buffer that a deferred copy fills.
  absl::Status LandCopiesInto(std::span<const BlockCopy> reads) {
    int64_t through = 0;
    for (const Pending& p : pending_) {
      for (const BlockCopy& c : p.copies) {
        for (const BlockCopy& r : reads) {
          if (r.host == c.host) through = p.ticket;
        }
      }
    }
    return through > 0 ? LandThrough(through) : absl::OkStatus();
  }

  const int polls_before_done_;
  std::deque<Pending> pending_;
  int64_t next_ticket_ = 1;
  int64_t done_through_ = 0;
  Counts counts_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_DEFERRED_COPY_BACKEND_H_
