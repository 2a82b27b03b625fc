// ApplyTokenMask (token_masks.h).
#include "backend/token_masks.h"

#include <limits>

namespace kvtier {

void ApplyTokenMask(const uint32_t* mask, std::span<float> logits) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < logits.size(); ++t) {
    if (((mask[t / 32] >> (t % 32)) & 1u) == 0) logits[t] = minus_inf;
  }
}

}  // namespace kvtier
