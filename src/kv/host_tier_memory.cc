// Implementation of HostTierMemory (host_tier_memory.h).
#include "kv/host_tier_memory.h"

#include <unistd.h>

#include <algorithm>

#include "backend/backend.h"
#include "common/status_macros.h"

namespace kvtier {
namespace {

size_t PageBytes() {
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : size_t{4096};
}

size_t RoundUp(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

}  // namespace

absl::StatusOr<std::unique_ptr<HostTierMemory>> HostTierMemory::Create(Backend* backend, size_t bytes,
                                                                       size_t chunk_bytes) {
  const size_t page = PageBytes();
  const size_t region = RoundUp(std::max<size_t>(bytes, 1), page);
  const size_t chunk = RoundUp(std::max<size_t>(chunk_bytes, 1), page);
  ASSIGN_OR_RETURN(void* base, backend->ReserveHostMemory(region));
  return std::unique_ptr<HostTierMemory>(new HostTierMemory(backend, static_cast<uint8_t*>(base), region, chunk));
}

HostTierMemory::HostTierMemory(Backend* backend, uint8_t* base, size_t bytes, size_t chunk_bytes)
    : backend_(backend), base_(base), bytes_(bytes), chunk_bytes_(chunk_bytes) {
  if (!backend_->PinsHostMemory()) return;
  // Chunks [k * chunk, min((k + 1) * chunk, bytes)): the destructor unpins exactly these.
  pinning_ = std::make_unique<ChunkedPreparer>(
      0, static_cast<int64_t>(bytes_), static_cast<int64_t>(chunk_bytes_), [this](int64_t begin, int64_t end) {
        return backend_->PinHostMemory(base_ + begin, static_cast<size_t>(end - begin));
      });
}

HostTierMemory::~HostTierMemory() {
  size_t pinned = 0;
  if (pinning_ != nullptr) {
    pinning_->Cancel();
    pinning_->Wait();  // the chunk being pinned finishes: then ready() is final
    pinned = static_cast<size_t>(pinning_->ready());
    pinning_.reset();
  }
  for (size_t begin = 0; begin < pinned; begin += chunk_bytes_) {
    backend_->UnpinHostMemory(base_ + begin, std::min(chunk_bytes_, pinned - begin));
  }
  backend_->ReleaseHostMemory(base_, bytes_);
}

size_t HostTierMemory::ready_bytes() const {
  return pinning_ == nullptr ? bytes_ : static_cast<size_t>(pinning_->ready());
}

}  // namespace kvtier
