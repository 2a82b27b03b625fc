// LruSet: the eviction order of one tier's unreferenced cached blocks — least recently
// used first, and among those the lowest priority first (a block keeps the highest
// priority of the sequences that made or reused it). O(log P) insert, erase and pop for P
// distinct priorities. Not thread-safe.
#ifndef KVTIER_KV_LRU_SET_H_
#define KVTIER_KV_LRU_SET_H_

#include <cstdint>
#include <list>
#include <map>
#include <optional>

#include "absl/container/flat_hash_map.h"

namespace kvtier {

class LruSet {
 public:
  // Adds id as the most recently used of its priority (no-op if present).
  void PushBack(int32_t id, int32_t priority = 0) {
    if (where_.contains(id)) return;
    std::list<int32_t>& order = by_priority_[priority];
    order.push_back(id);
    where_[id] = {priority, std::prev(order.end())};
  }
  void Erase(int32_t id) {
    auto it = where_.find(id);
    if (it == where_.end()) return;
    auto level = by_priority_.find(it->second.priority);
    level->second.erase(it->second.position);
    if (level->second.empty()) by_priority_.erase(level);
    where_.erase(it);
  }
  bool Contains(int32_t id) const { return where_.contains(id); }
  // The next victim (least recently used of the lowest priority), removed from the set.
  std::optional<int32_t> PopFront() {
    if (by_priority_.empty()) return std::nullopt;
    const int32_t id = by_priority_.begin()->second.front();
    Erase(id);
    return id;
  }
  int64_t size() const { return static_cast<int64_t>(where_.size()); }
  // Calls fn(id) in eviction order (PopFront's order) until it returns false. fn must not
  // change the set.
  template <typename Fn>
  void ForEachInEvictionOrder(Fn&& fn) const {
    for (const auto& [priority, order] : by_priority_) {
      for (int32_t id : order) {
        if (!fn(id)) return;
      }
    }
  }

 private:
  struct Where {
    int32_t priority;
    std::list<int32_t>::iterator position;
  };
  std::map<int32_t, std::list<int32_t>> by_priority_;  // lowest priority first
  absl::flat_hash_map<int32_t, Where> where_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_LRU_SET_H_
