// FramePool and Expander (stack.h).
#include "grammar/stack.h"

#include <algorithm>

namespace kvtier::grammar {

int32_t FramePool::Push(int32_t return_node, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(return_node);
  auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(frames_.size()));
  if (inserted) frames_.push_back({return_node, parent});
  return it->second;
}

void FramePool::Clear() {
  frames_.resize(1);
  index_.clear();
}

bool Expander::Expand(Stack seed, Positions* out) {
  out->Clear();
  work_.clear();
  work_.push_back(seed);
  return Run(out);
}

bool Expander::Advance(const Positions& in, uint8_t byte, Positions* out) {
  out->Clear();
  work_.clear();
  for (const Stack& s : in.stacks) {
    for (const Automaton::ByteEdge& e : automaton_->edges(s.node)) {
      if (e.lo > byte) break;  // edges are sorted by lo
      if (byte <= e.hi) work_.push_back({e.target, s.frame});
    }
  }
  if (work_.empty()) return true;
  return Run(out);
}

bool Expander::Run(Positions* out) {
  visited_.clear();
  while (!work_.empty()) {
    const Stack s = work_.back();
    work_.pop_back();
    if (!visited_.insert(s.key()).second) continue;
    // Positions reached without reading are bounded too (a long chain of rule ends).
    if (static_cast<int64_t>(visited_.size()) > kMaxVisitedPerStack * max_stacks_) return false;
    const Automaton::Node& node = automaton_->node(s.node);
    if (node.edges_end > node.edges_begin) {
      out->stacks.push_back(s);
      if (static_cast<int32_t>(out->stacks.size()) > max_stacks_) return false;
    }
    if (node.accept) {
      if (s.frame == FramePool::kBottom) {
        out->exited = true;
      } else {
        work_.push_back({pool_->return_node(s.frame), pool_->parent(s.frame)});
      }
    }
    for (const Automaton::Call& c : automaton_->calls(s.node)) {
      work_.push_back({automaton_->start(c.rule), pool_->Push(c.next, s.frame)});
    }
  }
  std::sort(out->stacks.begin(), out->stacks.end());
  return true;
}

}  // namespace kvtier::grammar
