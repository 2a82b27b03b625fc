// Automaton: a Grammar compiled into a byte-level recursive transition network — one
// epsilon-free NFA per rule whose edges read a byte range or call another rule. A parse
// position is a stack of nodes (stack.h): the top reads bytes, the frames below are where
// each called rule returns to. Character classes become the byte-range sequences of their
// UTF-8 encodings, so the machine accepts exactly the grammar's UTF-8 texts.
//
// Build guarantees what the matcher relies on:
//  - every node can still reach its rule's end (non-productive edges and calls are cut),
//    so a live parse position can always be completed: a mask is never empty while the
//    vocabulary has a token for every byte the grammar can need;
//  - no left recursion (a rule reaching itself before reading a byte), so expanding calls
//    without reading terminates; it is refused, naming the cycle, as llama.cpp does.
// Immutable after Build; thread-safe.
#ifndef KVTIER_GRAMMAR_AUTOMATON_H_
#define KVTIER_GRAMMAR_AUTOMATON_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace kvtier::grammar {

struct AutomatonLimits {
  int32_t max_nodes = 200000;  // NFA states before epsilon removal (repetitions copy)
  // States visited computing epsilon closures, summed (long chains of optional parts).
  int64_t max_closure_work = 40'000'000;
};

class Automaton {
 public:
  struct ByteEdge {
    uint8_t lo = 0;  // inclusive
    uint8_t hi = 0;  // inclusive
    int32_t target = 0;
  };
  struct Call {
    int32_t rule = 0;
    int32_t next = 0;  // where the caller continues when the rule ends
  };
  struct Node {
    int32_t rule = 0;
    bool accept = false;  // the rule may end here
    int32_t edges_begin = 0, edges_end = 0;  // ByteEdges, sorted by lo
    int32_t calls_begin = 0, calls_end = 0;
  };

  // InvalidArgument for left recursion, a grammar that matches nothing, or one larger than
  // the limits.
  static absl::StatusOr<std::shared_ptr<const Automaton>> Build(const Grammar& grammar,
                                                                const AutomatonLimits& limits = {});

  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const Node& node(int32_t n) const { return nodes_[static_cast<size_t>(n)]; }
  std::span<const ByteEdge> edges(int32_t n) const {
    const Node& x = node(n);
    return {edges_.data() + x.edges_begin, static_cast<size_t>(x.edges_end - x.edges_begin)};
  }
  std::span<const Call> calls(int32_t n) const {
    const Node& x = node(n);
    return {calls_.data() + x.calls_begin, static_cast<size_t>(x.calls_end - x.calls_begin)};
  }
  bool reads_bytes(int32_t n) const { return node(n).edges_end > node(n).edges_begin; }
  int32_t start(int32_t rule) const { return starts_[static_cast<size_t>(rule)]; }
  int32_t root_rule() const { return root_; }
  int32_t num_rules() const { return static_cast<int32_t>(starts_.size()); }

 private:
  Automaton() = default;
  friend class AutomatonBuilder;

  std::vector<Node> nodes_;
  std::vector<ByteEdge> edges_;
  std::vector<Call> calls_;
  std::vector<int32_t> starts_;  // per rule; -1 for rules the root never reaches
  int32_t root_ = 0;
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_AUTOMATON_H_
