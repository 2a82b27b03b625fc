// Implementation of BlockPool (block_pool.h).
#include "kv/block_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvtier {

BlockPool::BlockPool(int64_t num_blocks, int64_t num_available) : ref_counts_(static_cast<size_t>(num_blocks), 0) {
  MakeAvailable(num_available);
}

void BlockPool::MakeAvailable(int64_t n) {
  n = std::min(n, num_blocks());
  for (; num_available_ < n; ++num_available_) free_.push_back(static_cast<BlockId>(num_available_));
}

std::optional<BlockId> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  BlockId id = free_.front();
  free_.pop_front();
  ref_counts_[static_cast<size_t>(id)] = 1;
  peak_used_ = std::max(peak_used_, num_used());
  return id;
}

bool BlockPool::AllocateSpecific(BlockId id) {
  if (id < 0 || id >= num_available_ || ref_counts_[static_cast<size_t>(id)] != 0) return false;
  auto it = std::find(free_.begin(), free_.end(), id);
  if (it == free_.end()) return false;
  free_.erase(it);
  ref_counts_[static_cast<size_t>(id)] = 1;
  peak_used_ = std::max(peak_used_, num_used());
  return true;
}

void BlockPool::AddRef(BlockId id) { ++ref_counts_[static_cast<size_t>(id)]; }

bool BlockPool::Release(BlockId id) {
  int32_t& count = ref_counts_[static_cast<size_t>(id)];
  if (--count > 0) return false;
  free_.push_back(id);
  return true;
}

absl::Status BlockPool::VerifyIntegrity() const {
  std::vector<bool> in_free(ref_counts_.size(), false);
  for (BlockId id : free_) {
    if (id < 0 || id >= num_blocks()) return absl::InternalError(absl::StrCat("free id ", id, " out of range"));
    if (in_free[static_cast<size_t>(id)]) return absl::InternalError(absl::StrCat("block ", id, " twice in free queue"));
    in_free[static_cast<size_t>(id)] = true;
    if (ref_counts_[static_cast<size_t>(id)] != 0) {
      return absl::InternalError(absl::StrCat("free block ", id, " has ref count ", ref_counts_[static_cast<size_t>(id)]));
    }
  }
  for (size_t id = 0; id < ref_counts_.size(); ++id) {
    const bool available = static_cast<int64_t>(id) < num_available_;
    if (available && !in_free[id] && ref_counts_[id] <= 0) {
      return absl::InternalError(absl::StrCat("block ", id, " is neither free nor referenced"));
    }
    if (!available && (in_free[id] || ref_counts_[id] != 0)) {
      return absl::InternalError(absl::StrCat("block ", id, " is used before it is available (", num_available_,
                                              " of ", ref_counts_.size(), " are)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
