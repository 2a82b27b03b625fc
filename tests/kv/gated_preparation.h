// Test doubles that hold a context's background tier preparation at a gate, so that the
// window in which a context runs with its host tier partly pinned, or its disk file partly
// reserved, is as long (and lands where) the test wants:
// - Gate: admits one preparation step per permit; the test hands out permits.
// - GatedPinBackend: a Backend whose host memory pins pass a gate; every host <-> device
//   copy is checked to touch only pinned parts of the reserved region (a copy that does not
//   fails with Internal); what it saw is kept in a PinLedger the test shares.
// - GatedFileIo: a FileIo over FakeFileIo whose files' Allocate calls pass the gate; every
//   block read and write is checked to stay inside the space reserved so far (counted in
//   unreserved_ios).
// Thread-safe: the gated calls run on the KV manager's preparation threads, the rest on the
// test's and the stepping thread.
#ifndef KVTIER_TESTS_KV_GATED_PREPARATION_H_
#define KVTIER_TESTS_KV_GATED_PREPARATION_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/errors.h"
#include "storage/file_io.h"
#include "testing/fake_file_io.h"
#include "testing/file_io_wrapper.h"
#include "testing/forwarding_backend.h"

namespace kvtier::testing {

class Gate {
 public:
  // Lets n more steps through (AllowAll: every step from now on).
  void Allow(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    permits_ += n;
    cv_.notify_all();
  }
  void AllowAll() { Allow(std::numeric_limits<int64_t>::max() / 2); }
  // The step numbered `step` (0-based, in arrival order) fails instead of passing.
  void FailStep(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_step_ = step;
  }
  // Blocks the calling (preparation) thread until a permit is there; false when this step
  // is the one to fail.
  bool Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t step = arrived_++;
    cv_.notify_all();
    cv_.wait(lock, [this] { return permits_ > 0; });
    --permits_;
    ++passed_;
    cv_.notify_all();
    return step != fail_step_;
  }
  // Lets one more of `total` steps through and blocks until it has ended, so that what it
  // prepared is published whatever the machine's load: steps run one at a time and in
  // order, so the step after it arriving means it ended (the last one: until it passed).
  // False after 10 s.
  bool AllowOneAndWaitUntilItEnds(int64_t total) {
    std::unique_lock<std::mutex> lock(mu_);
    ++permits_;
    const int64_t target = ++granted_;
    cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] {
      return target < total ? arrived_ > target : passed_ >= target;
    });
  }
  // Blocks until `n` steps have arrived at the gate (passed or waiting); false after 10 s.
  bool WaitArrived(int64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return arrived_ >= n; });
  }
  // Blocks until `n` steps have passed; false after 10 s.
  bool WaitPassed(int64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return passed_ >= n; });
  }
  int64_t arrived() const {
    std::lock_guard<std::mutex> lock(mu_);
    return arrived_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t permits_ = 0;
  int64_t granted_ = 0;  // permits given one at a time by AllowOneAndWaitUntilItEnds
  int64_t arrived_ = 0;
  int64_t passed_ = 0;
  int64_t fail_step_ = -1;
};

// What a GatedPinBackend saw; shared with the test, so it outlives an engine that owns the
// backend (to check, after a context is freed, that every pinned chunk was unpinned).
class PinLedger {
 public:
  Gate& gate() { return gate_; }
  int64_t pins() const { return Read(pins_); }
  int64_t unpins() const { return Read(unpins_); }
  int64_t releases() const { return Read(releases_); }
  // Regions released while a chunk of them was still pinned (must stay 0).
  int64_t released_while_pinned() const { return Read(released_while_pinned_); }
  // Copies that touched reserved host memory not pinned (yet or any more); must stay 0.
  int64_t unpinned_copies() const { return Read(unpinned_copies_); }

  void Reserved(const void* base, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    regions_.emplace_back(Address(base), Address(base) + bytes);
  }
  void Pinned(const void* ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.emplace_back(Address(ptr), Address(ptr) + bytes);
    ++pins_;
  }
  void Unpinned(const void* ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(pinned_.begin(), pinned_.end(), std::make_pair(Address(ptr), Address(ptr) + bytes));
    if (it != pinned_.end()) pinned_.erase(it);
    ++unpins_;
  }
  void Released(const void* base, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ++releases_;
    for (const auto& [begin, end] : pinned_) {
      if (begin >= Address(base) && end <= Address(base) + bytes) ++released_while_pinned_;
    }
    auto it = std::find(regions_.begin(), regions_.end(), std::make_pair(Address(base), Address(base) + bytes));
    if (it != regions_.end()) regions_.erase(it);
  }
  // Host buffers inside a reserved region must lie inside one pinned range.
  absl::Status CheckPinned(std::span<const BlockCopy> copies, size_t block_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const BlockCopy& c : copies) {
      const uintptr_t begin = Address(c.host), end = begin + block_bytes;
      const bool reserved = std::any_of(regions_.begin(), regions_.end(),
                                        [&](const auto& r) { return begin >= r.first && begin < r.second; });
      if (!reserved) continue;  // a staging buffer
      const bool pinned = std::any_of(pinned_.begin(), pinned_.end(),
                                      [&](const auto& r) { return begin >= r.first && end <= r.second; });
      if (!pinned) {
        ++unpinned_copies_;
        return absl::InternalError(absl::StrCat("copy touches host memory not pinned yet (device block ",
                                                c.device_block, ")"));
      }
    }
    return absl::OkStatus();
  }

 private:
  static uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  int64_t Read(const int64_t& counter) const {
    std::lock_guard<std::mutex> lock(mu_);
    return counter;
  }

  Gate gate_;
  mutable std::mutex mu_;
  std::vector<std::pair<uintptr_t, uintptr_t>> regions_;  // reserved [begin, end)
  std::vector<std::pair<uintptr_t, uintptr_t>> pinned_;   // pinned [begin, end)
  int64_t pins_ = 0;
  int64_t unpins_ = 0;
  int64_t releases_ = 0;
  int64_t released_while_pinned_ = 0;
  int64_t unpinned_copies_ = 0;
};

// Derives from ForwardingBackend: only the host-memory calls are gated or checked.
class GatedPinBackend final : public ForwardingBackend {
 public:
  GatedPinBackend(std::unique_ptr<Backend> inner, std::shared_ptr<PinLedger> ledger)
      : ForwardingBackend(std::move(inner)), ledger_(std::move(ledger)) {}

  bool PinsHostMemory() const override { return true; }
  // Host slots are copied to and from the device (and so checked), never read in place.
  bool ReadsHostResidentKv() const override { return false; }
  absl::StatusOr<void*> ReserveHostMemory(size_t bytes) override {
    absl::StatusOr<void*> base = inner().ReserveHostMemory(bytes);
    if (base.ok()) ledger_->Reserved(*base, bytes);
    return base;
  }
  absl::Status PinHostMemory(void* ptr, size_t bytes) override {
    if (!ledger_->gate().Pass()) return absl::ResourceExhaustedError("pinning refused (injected)");
    if (absl::Status s = inner().PinHostMemory(ptr, bytes); !s.ok()) return s;
    ledger_->Pinned(ptr, bytes);
    return absl::OkStatus();
  }
  void UnpinHostMemory(void* ptr, size_t bytes) override {
    inner().UnpinHostMemory(ptr, bytes);
    ledger_->Unpinned(ptr, bytes);
  }
  void ReleaseHostMemory(void* ptr, size_t bytes) override {
    ledger_->Released(ptr, bytes);
    inner().ReleaseHostMemory(ptr, bytes);
  }
  absl::Status CopyBlocksToHost(std::span<const BlockCopy> copies) override {
    if (absl::Status s = Check(copies); !s.ok()) return s;
    return inner().CopyBlocksToHost(copies);
  }
  absl::Status CopyBlocksFromHost(std::span<const BlockCopy> copies) override {
    if (absl::Status s = Check(copies); !s.ok()) return s;
    return inner().CopyBlocksFromHost(copies);
  }
  absl::Status PrefetchBlocksFromHost(std::span<const BlockCopy> copies) override {
    if (absl::Status s = Check(copies); !s.ok()) return s;
    return inner().PrefetchBlocksFromHost(copies);
  }
  absl::StatusOr<int64_t> StartCopiesToHost(std::span<const BlockCopy> copies) override {
    if (absl::Status s = Check(copies); !s.ok()) return s;
    return inner().StartCopiesToHost(copies);
  }

 private:
  absl::Status Check(std::span<const BlockCopy> copies) {
    return ledger_->CheckPinned(copies, inner().kv_layout().BlockBytes());
  }

  std::shared_ptr<PinLedger> ledger_;
};

class GatedFileIo final : public FileIoWrapper {
 public:
  explicit GatedFileIo(FakeFileIo* inner) : FileIoWrapper(inner), state_(std::make_shared<State>()) {}

  Gate& gate() { return state_->gate; }
  int64_t allocations() const { return state_->allocations.load(); }
  int64_t unreserved_ios() const { return state_->unreserved_ios.load(); }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path, int64_t size) override {
    auto file = inner()->OpenForReadWrite(path, size);
    if (!file.ok()) return file.status();
    // The disk index's journal grows by appends: no slot I/O, nothing to reserve.
    if (PathEndsWith(path, ".journal")) return file;
    absl::StatusOr<int64_t> reserved = (*file)->Size();
    if (!reserved.ok()) return reserved.status();
    return std::unique_ptr<RandomAccessFile>(new File(std::move(*file), *reserved, state_));
  }

 private:
  struct State {
    Gate gate;
    std::atomic<int64_t> allocations{0};
    std::atomic<int64_t> unreserved_ios{0};
  };
  class File final : public RandomAccessFileWrapper {
   public:
    File(std::unique_ptr<RandomAccessFile> inner, int64_t reserved, std::shared_ptr<State> state)
        : RandomAccessFileWrapper(std::move(inner)), reserved_(reserved), state_(std::move(state)) {}
    absl::Status Pread(int64_t offset, size_t n, void* out) override {
      Check(offset, n);
      return inner()->Pread(offset, n, out);
    }
    absl::Status PreadDirect(int64_t offset, size_t n, void* out) override { return Pread(offset, n, out); }
    absl::Status Pwrite(int64_t offset, const void* data, size_t n) override {
      Check(offset, n);
      return inner()->Pwrite(offset, data, n);
    }
    absl::Status Allocate(int64_t offset, int64_t n) override {
      if (!state_->gate.Pass()) return IoError("preallocating: No space left on device (injected)");
      absl::Status s = inner()->Allocate(offset, n);
      if (s.ok()) {
        int64_t end = offset + n;
        int64_t seen = reserved_.load();
        while (end > seen && !reserved_.compare_exchange_weak(seen, end)) {
        }
        ++state_->allocations;
      }
      return s;
    }

   private:
    void Check(int64_t offset, size_t n) {
      if (offset + static_cast<int64_t>(n) > reserved_.load()) ++state_->unreserved_ios;
    }
    std::atomic<int64_t> reserved_;
    std::shared_ptr<State> state_;
  };
  std::shared_ptr<State> state_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_GATED_PREPARATION_H_
