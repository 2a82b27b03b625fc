// TokenMasks: allowed-token bitmasks for some logits rows of one forward — the rows of
// grammar-constrained sequences — computed on another thread while the forward runs.
// A backend picking tokens (ForwardGreedy, ForwardSampled) calls Wait() once its forward
// is under way, then applies each row's mask before any other sampling step: the logits
// of disallowed tokens become -inf. Only the mask words cross to a device: ceil(vocab/32)
// 32-bit words per constrained row. Plain view; the engine owns the memory and the thread.
#ifndef KVTIER_BACKEND_TOKEN_MASKS_H_
#define KVTIER_BACKEND_TOKEN_MASKS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace kvtier {

struct TokenMasks {
  // slot_of_row value of a row without a mask (a device-side table reads it as is).
  static constexpr int32_t kNoMask = -1;

  int32_t words_per_row = 0;         // ceil(vocab_size / 32)
  // (num_slots, words_per_row): bit t % 32 of word t / 32 set = token t allowed. Host
  // memory from Backend::AllocateHostMemory (page-locked on CUDA), so it copies directly.
  const uint32_t* words = nullptr;
  int32_t num_slots = 0;
  std::vector<int32_t> slot_of_row;  // per logits row of the batch: its slot or kNoMask
  // Blocks until every slot is filled; empty when they already are.
  std::function<void()> wait;

  void Wait() const {
    if (wait) wait();
  }
  // Row r's mask, or nullptr when row r is not constrained.
  const uint32_t* Row(size_t r) const {
    if (r >= slot_of_row.size() || slot_of_row[r] == kNoMask) return nullptr;
    return words + static_cast<size_t>(slot_of_row[r]) * static_cast<size_t>(words_per_row);
  }
};

// Sets to -inf the logits of tokens the mask does not allow (one row of `vocab` logits).
void ApplyTokenMask(const uint32_t* mask, std::span<float> logits);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_TOKEN_MASKS_H_
