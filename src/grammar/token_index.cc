// TokenIndex::Build: one vocabulary-trie walk per byte-reading node (token_index.h).
#include "grammar/token_index.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "grammar/stack.h"

namespace kvtier::grammar {
namespace {

// Sets of positions (below a scope's bottom frame) interned as states, with their byte
// transitions cached: state 0 is the empty set.
class PositionsDfa {
 public:
  struct Step {
    int32_t next = 0;     // 0: no position left
    bool exited = false;  // some position ended the scope's rule on this byte
  };

  PositionsDfa(const Automaton* automaton, int32_t max_stacks) : expander_(automaton, &pool_, max_stacks) {
    states_.emplace_back();
  }

  int32_t Start(int32_t node) { return Intern({Stack{node, FramePool::kBottom}}); }

  // False when the result overflows max_stacks.
  bool Advance(int32_t state, uint8_t byte, Step* step) {
    const uint64_t key = (static_cast<uint64_t>(state) << 8) | byte;
    auto it = transitions_.find(key);
    if (it != transitions_.end()) {
      *step = it->second;
      return true;
    }
    in_.stacks = states_[static_cast<size_t>(state)];
    in_.exited = false;
    if (!expander_.Advance(in_, byte, &out_)) return false;
    step->exited = out_.exited;
    step->next = out_.stacks.empty() ? 0 : Intern(out_.stacks);
    transitions_.emplace(key, *step);
    return true;
  }

 private:
  int32_t Intern(const std::vector<Stack>& stacks) {
    std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(Stack));
    auto [it, inserted] = ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
    if (inserted) states_.push_back(stacks);
    return it->second;
  }

  FramePool pool_;
  Expander expander_;
  Positions in_, out_;
  std::vector<std::vector<Stack>> states_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_map<uint64_t, Step> transitions_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<const TokenIndex>> TokenIndex::Build(const Automaton& automaton,
                                                                    const Vocabulary& vocabulary,
                                                                    const IndexLimits& limits) {
  auto index = std::unique_ptr<TokenIndex>(new TokenIndex());
  index->nodes_.resize(static_cast<size_t>(automaton.num_nodes()));
  PositionsDfa dfa(&automaton, limits.max_stacks);
  const auto trie = vocabulary.trie().nodes();
  const int32_t num_words = vocabulary.num_words();
  std::vector<int32_t> state_at_depth;
  std::vector<int32_t> accepted, exits;
  std::vector<uint32_t> accepted_bits(static_cast<size_t>(num_words));
  std::vector<std::pair<std::string_view, int32_t>> suffixes;
  int64_t steps = 0;
  for (int32_t n = 0; n < automaton.num_nodes(); ++n) {
    if (!automaton.reads_bytes(n)) continue;
    accepted.clear();
    exits.clear();
    state_at_depth.assign(1, dfa.Start(n));
    for (int32_t i = 1; i < static_cast<int32_t>(trie.size());) {
      const ByteTrie::Node& t = trie[static_cast<size_t>(i)];
      PositionsDfa::Step step;
      if (!dfa.Advance(state_at_depth[static_cast<size_t>(t.depth - 1)], t.byte, &step)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the grammar is too ambiguous to index: more than ", limits.max_stacks, " parse positions at once"));
      }
      if (++steps > limits.max_walk_steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the grammar is too large to index for this vocabulary (more than ", limits.max_walk_steps,
            " trie steps)"));
      }
      if (step.next != 0 || step.exited) {
        for (int32_t id : vocabulary.trie().ids_at(t)) accepted.push_back(id);
      }
      if (step.exited && t.subtree_end > i + 1) exits.push_back(i);
      if (step.next != 0) {
        if (state_at_depth.size() <= static_cast<size_t>(t.depth)) state_at_depth.resize(static_cast<size_t>(t.depth) + 1);
        state_at_depth[static_cast<size_t>(t.depth)] = step.next;
        ++i;
      } else {
        i = t.subtree_end;
      }
    }
    NodeTokens& out = index->nodes_[static_cast<size_t>(n)];
    std::sort(accepted.begin(), accepted.end());
    std::fill(accepted_bits.begin(), accepted_bits.end(), 0u);
    for (int32_t id : accepted) accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    // Uncertain: below an exit, the tokens not already accepted, keyed by what follows.
    suffixes.clear();
    for (int32_t e : exits) {
      const ByteTrie::Node& at = trie[static_cast<size_t>(e)];
      for (int32_t j = e + 1; j < at.subtree_end; ++j) {
        for (int32_t id : vocabulary.trie().ids_at(trie[static_cast<size_t>(j)])) {
          if ((accepted_bits[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) continue;
          suffixes.emplace_back(vocabulary.bytes(id).substr(static_cast<size_t>(at.depth)), id);
        }
      }
    }
    if (!suffixes.empty()) out.uncertain = ByteTrie::Build(std::move(suffixes));
    suffixes = {};
    if (static_cast<int64_t>(accepted.size()) > num_words) {
      out.accepted_bits = accepted_bits;
    } else {
      out.accepted = accepted;
    }
    index->memory_bytes_ += out.accepted.size() * sizeof(int32_t) + out.accepted_bits.size() * sizeof(uint32_t) +
                            out.uncertain.memory_bytes();
  }
  index->walk_steps_ = steps;
  return std::unique_ptr<const TokenIndex>(std::move(index));
}

}  // namespace kvtier::grammar
