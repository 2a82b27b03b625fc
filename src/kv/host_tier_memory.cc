// Implementation of HostTierMemory (host_tier_memory.h).
#include "kv/host_tier_memory.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "backend/backend.h"
#include "common/status_macros.h"
#include "kv/page_populator.h"

namespace kvtier {
namespace {

size_t PageBytes() {
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : size_t{4096};
}

size_t RoundUp(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

}  // namespace

absl::StatusOr<std::unique_ptr<HostTierMemory>> HostTierMemory::Create(Backend* backend, size_t bytes,
                                                                       size_t chunk_bytes, size_t block_bytes,
                                                                       bool start_pinning, HostPinSchedule schedule) {
  const size_t page = PageBytes();
  const size_t region = RoundUp(std::max<size_t>(bytes, 1), page);
  const size_t unit = std::lcm(page, std::max<size_t>(block_bytes, 1));
  const size_t chunk = RoundUp(std::max<size_t>(chunk_bytes, 1), unit);
  ASSIGN_OR_RETURN(void* base, backend->ReserveHostMemory(region));
  std::unique_ptr<HostTierMemory> memory(new HostTierMemory(backend, static_cast<uint8_t*>(base), region, chunk, schedule));
  if (start_pinning) memory->StartPinning();
  return memory;
}

HostTierMemory::HostTierMemory(Backend* backend, uint8_t* base, size_t bytes, size_t chunk_bytes,
                               HostPinSchedule schedule)
    : backend_(backend),
      base_(base),
      bytes_(bytes),
      chunk_bytes_(chunk_bytes),
      schedule_(schedule),
      pins_(backend->PinsHostMemory()) {}

void HostTierMemory::StartPinning() {
  if (!pins_ || pinning_ != nullptr) return;
  // The chunks are paged in ahead of their pins, on threads of their own (a quarter of the
  // cores, 1 to 4): the pinning thread then only registers pages that exist.
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
  populator_ = std::make_unique<PagePopulator>(base_, bytes_, chunk_bytes_, threads, /*ahead=*/4 * threads);
  // The part pinned now, unpaced: whole chunks, so that the destructor's unpins below match.
  const size_t at_start = std::min(RoundUp(schedule_.bytes_at_start, chunk_bytes_), bytes_);
  size_t pinned = 0;
  while (pinned < at_start && start_status_.ok()) {
    const size_t end = std::min(pinned + chunk_bytes_, bytes_);
    start_status_ = PinChunk(pinned, end, /*paced=*/false);
    if (start_status_.ok()) pinned = end;
  }
  // Chunks [k * chunk, min((k + 1) * chunk, bytes)): the destructor unpins exactly these.
  // After a refused pin nothing more is pinned ([pinned, pinned): done at once).
  pinning_ = std::make_unique<ChunkedPreparer>(
      static_cast<int64_t>(pinned), static_cast<int64_t>(start_status_.ok() ? bytes_ : pinned),
      static_cast<int64_t>(chunk_bytes_),
      [this](int64_t begin, int64_t end) { return PinChunk(static_cast<size_t>(begin), static_cast<size_t>(end), true); });
}

absl::Status HostTierMemory::PinChunk(size_t begin, size_t end, bool paced) {
  // Pages that exist already: the pin then holds the device driver's lock only to lock them.
  if (!populator_->WaitFor(begin / chunk_bytes_)) PopulatePages(base_ + begin, end - begin);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status pinned = backend_->PinHostMemory(base_ + begin, end - begin);
  // A pin holds the driver's lock throughout, and every launch and copy of a stepping
  // thread waits for it. The next pin starts after a short yield at least, so a waiting
  // thread gets the lock first, and no sooner than this chunk's bytes at the paced speed:
  // the pins' share of the lock stays small. A pin that itself waited long for the lock
  // (a busy stepping thread) needs no pause beyond the yield.
  if (!paced) return pinned;
  auto resume = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  if (schedule_.bytes_per_second > 0) {
    const auto next = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
                                  static_cast<double>(end - begin) / schedule_.bytes_per_second));
    resume = std::max(resume, next);
  }
  std::this_thread::sleep_until(resume);
  return pinned;
}

HostTierMemory::~HostTierMemory() {
  size_t pinned = 0;
  if (pinning_ != nullptr) {
    pinning_->Cancel();
    pinning_->Wait();  // the chunk being pinned finishes: then ready() is final
    pinned = static_cast<size_t>(pinning_->ready());
    pinning_.reset();
    populator_.reset();
  }
  for (size_t begin = 0; begin < pinned; begin += chunk_bytes_) {
    backend_->UnpinHostMemory(base_ + begin, std::min(chunk_bytes_, pinned - begin));
  }
  backend_->ReleaseHostMemory(base_, bytes_);
}

size_t HostTierMemory::ready_bytes() const {
  if (!pins_) return bytes_;
  return pinning_ == nullptr ? 0 : static_cast<size_t>(pinning_->ready());
}

}  // namespace kvtier
