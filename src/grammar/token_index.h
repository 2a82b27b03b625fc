// TokenIndex: for every automaton node that reads bytes, which tokens can be read starting
// there — computed once per (grammar, vocabulary), so a mask costs microseconds.
//
// A runtime position is a stack whose top is node n. Walking the vocabulary trie from n
// alone (the frames below n unknown), each token falls in one of three classes, as in
// xgrammar's adaptive token mask cache:
//  - accepted: its bytes are read within n's rule (and the rules it calls), or the rule
//    ends exactly at its last byte: allowed whatever lies below n;
//  - rejected: the walk dies before its end without the rule ending: never allowed;
//  - uncertain: n's rule can end in the middle of the token, and what remains depends on
//    the frames below. The matcher walks their remaining bytes from the real frames at run
//    time: as the subtrees of the vocabulary trie below the few points where the rule can
//    end (a rule that ends after a space: every token starting with a space), or, when
//    there are many such points (a string closing inside many tokens), as one trie of the
//    remaining bytes merged over them, so shared suffixes (",", "}", ...) are read once.
// Accepted sets are stored as sorted ids or, when larger than a bitmask, as one.
// The walks share a lazily built DFA over sets of positions (equal position sets read a
// byte the same way), so a node whose tokens all stay in one loop (string contents) costs
// one table lookup per trie node. Build spreads the nodes over a few threads.
// Immutable after Build; thread-safe.
#ifndef KVTIER_GRAMMAR_TOKEN_INDEX_H_
#define KVTIER_GRAMMAR_TOKEN_INDEX_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/automaton.h"
#include "grammar/byte_trie.h"
#include "grammar/vocabulary.h"

namespace kvtier::grammar {

struct IndexLimits {
  // Up to this many exit points, uncertain tokens are kept as vocabulary subtrees; beyond,
  // as a merged suffix trie.
  int32_t max_exit_points = 256;
  // Trie nodes visited over all the walks: bounds compile time for huge grammars.
  int64_t max_walk_steps = 500'000'000;
  // Positions one set may hold (ambiguity bound, as in the matcher).
  int32_t max_stacks = 1024;
  // Threads walking nodes at once (a grammar of few nodes uses one).
  int32_t max_threads = 8;
};

struct NodeTokens {
  std::vector<int32_t> accepted;        // sorted ids (when at most num_words of them)
  std::vector<uint32_t> accepted_bits;  // else a bitmask of num_words words
  // Uncertain tokens, one of the two forms:
  std::vector<int32_t> exit_points;     // vocabulary trie nodes: the tokens below each
  ByteTrie suffixes;                    // remaining bytes after the rule ends -> token ids
  bool has_uncertain() const { return !exit_points.empty() || !suffixes.empty(); }
};

class TokenIndex {
 public:
  // InvalidArgument when the limits are exceeded (the grammar is too large or ambiguous
  // to index for this vocabulary).
  static absl::StatusOr<std::unique_ptr<const TokenIndex>> Build(const Automaton& automaton,
                                                                 const Vocabulary& vocabulary,
                                                                 const IndexLimits& limits = {});

  // Empty for nodes that read no byte.
  const NodeTokens& at(int32_t node) const { return nodes_[static_cast<size_t>(node)]; }
  size_t memory_bytes() const { return memory_bytes_; }
  int64_t walk_steps() const { return walk_steps_; }

 private:
  TokenIndex() = default;

  std::vector<NodeTokens> nodes_;
  size_t memory_bytes_ = 0;
  int64_t walk_steps_ = 0;
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_TOKEN_INDEX_H_
