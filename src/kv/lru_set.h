// LruSet: an ordered set of ids with O(1) insert-at-back, erase and pop-front — the
// eviction order of one tier's unreferenced cached blocks. Not thread-safe.
#ifndef KVTIER_KV_LRU_SET_H_
#define KVTIER_KV_LRU_SET_H_

#include <cstdint>
#include <list>
#include <optional>

#include "absl/container/flat_hash_map.h"

namespace kvtier {

class LruSet {
 public:
  void PushBack(int32_t id) {
    if (where_.contains(id)) return;
    order_.push_back(id);
    where_[id] = std::prev(order_.end());
  }
  void Erase(int32_t id) {
    auto it = where_.find(id);
    if (it == where_.end()) return;
    order_.erase(it->second);
    where_.erase(it);
  }
  bool Contains(int32_t id) const { return where_.contains(id); }
  // The least recently used id that `skip` does not reject, removed from the set.
  template <typename Skip>
  std::optional<int32_t> PopFront(Skip skip) {
    for (auto it = order_.begin(); it != order_.end(); ++it) {
      if (skip(*it)) continue;
      int32_t id = *it;
      where_.erase(id);
      order_.erase(it);
      return id;
    }
    return std::nullopt;
  }
  std::optional<int32_t> PopFront() {
    return PopFront([](int32_t) { return false; });
  }
  int64_t size() const { return static_cast<int64_t>(order_.size()); }

 private:
  std::list<int32_t> order_;
  absl::flat_hash_map<int32_t, std::list<int32_t>::iterator> where_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_LRU_SET_H_
