// Parse positions of the Automaton: a position is a stack — the node about to read a byte
// on top, and below it the frames saying where each called rule returns to. Frames are
// hash-consed in a FramePool (equal stacks are equal (node, frame) pairs), so a set of
// positions is a small sorted vector and sharing between stacks costs nothing.
//
// Expand: from a seed position, everything reachable without reading — calls push a frame
// and enter the callee, rule ends pop one and continue at the return node — keeping the
// positions whose top reads bytes. Popping the bottom frame (FramePool::kBottom) "exits":
// for a whole parse that is the grammar being complete; for a token-index walk it is
// leaving the scope the walk started in. Advance reads one byte from every position, then
// expands. Both terminate because the Automaton has no left recursion.
// Not thread-safe: a FramePool and its Expander belong to one thread at a time.
#ifndef KVTIER_GRAMMAR_STACK_H_
#define KVTIER_GRAMMAR_STACK_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "grammar/automaton.h"

namespace kvtier::grammar {

struct Stack {
  int32_t node = 0;   // top: a node that reads bytes (or, as a seed, any node)
  int32_t frame = 0;  // the frames below it; FramePool::kBottom when none
  bool operator==(const Stack&) const = default;
  bool operator<(const Stack& o) const { return frame != o.frame ? frame < o.frame : node < o.node; }
  uint64_t key() const { return (static_cast<uint64_t>(static_cast<uint32_t>(frame)) << 32) | static_cast<uint32_t>(node); }
};

class FramePool {
 public:
  static constexpr int32_t kBottom = 0;

  FramePool() { frames_.push_back({-1, -1}); }
  // The frame "return to return_node, then continue with parent" (shared when it exists).
  int32_t Push(int32_t return_node, int32_t parent);
  int32_t return_node(int32_t frame) const { return frames_[static_cast<size_t>(frame)].node; }
  int32_t parent(int32_t frame) const { return frames_[static_cast<size_t>(frame)].parent; }
  size_t size() const { return frames_.size(); }
  void Clear();

 private:
  struct Frame {
    int32_t node;
    int32_t parent;
  };
  std::vector<Frame> frames_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
};

// A set of parse positions: stacks sorted and unique, and whether some path exited.
struct Positions {
  std::vector<Stack> stacks;
  bool exited = false;
  bool empty() const { return stacks.empty() && !exited; }
  void Clear() {
    stacks.clear();
    exited = false;
  }
};

class Expander {
 public:
  // max_stacks bounds one result (ambiguous grammars can multiply positions), and 64 times
  // it the positions one expansion may pass through.
  Expander(const Automaton* automaton, FramePool* pool, int32_t max_stacks)
      : automaton_(automaton), pool_(pool), max_stacks_(max_stacks) {}

  // out = the expansion of seed. False when it holds more than max_stacks stacks.
  bool Expand(Stack seed, Positions* out);
  // out = the expansion of every position of `in` after reading `byte`. False on overflow.
  bool Advance(const Positions& in, uint8_t byte, Positions* out);

  FramePool* pool() const { return pool_; }
  const Automaton& automaton() const { return *automaton_; }

 private:
  static constexpr int64_t kMaxVisitedPerStack = 64;
  bool Run(Positions* out);

  const Automaton* automaton_;
  FramePool* pool_;
  int32_t max_stacks_;
  std::vector<Stack> work_;
  absl::flat_hash_set<uint64_t> visited_;
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_STACK_H_
