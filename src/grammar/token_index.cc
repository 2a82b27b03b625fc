// TokenIndex::Build: one vocabulary-trie walk per byte-reading node (token_index.h).
#include "grammar/token_index.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "grammar/stack.h"

namespace kvtier::grammar {
namespace {

// Sets of positions (below a scope's bottom frame) interned as states, with their byte
// transitions cached in a dense table per state: state 0 is the empty set.
class PositionsDfa {
 public:
  // A transition: next state * 2 + exited; kUnknown until computed.
  static constexpr int32_t kUnknown = -1;

  PositionsDfa(const Automaton* automaton, int32_t max_stacks) : expander_(automaton, &pool_, max_stacks) {
    states_.emplace_back();
    table_.emplace_back();
  }

  int32_t Start(int32_t node) { return Intern({Stack{node, FramePool::kBottom}}); }

  // The packed transition, or kUnknown when the result overflows max_stacks.
  int32_t Advance(int32_t state, uint8_t byte) {
    std::array<int32_t, 256>& row = Row(state);
    if (row[byte] != kUnknown) return row[byte];
    in_.stacks = states_[static_cast<size_t>(state)];
    in_.exited = false;
    if (!expander_.Advance(in_, byte, &out_)) return kUnknown;
    const int32_t next = out_.stacks.empty() ? 0 : Intern(out_.stacks);
    const int32_t packed = next * 2 + (out_.exited ? 1 : 0);
    Row(state)[byte] = packed;  // Intern may have grown table_
    return packed;
  }

 private:
  std::array<int32_t, 256>& Row(int32_t state) {
    auto& row = table_[static_cast<size_t>(state)];
    if (row == nullptr) {
      row = std::make_unique<std::array<int32_t, 256>>();
      row->fill(kUnknown);
    }
    return *row;
  }

  int32_t Intern(const std::vector<Stack>& stacks) {
    std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(Stack));
    auto [it, inserted] = ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
    if (inserted) {
      states_.push_back(stacks);
      table_.emplace_back();
    }
    return it->second;
  }

  FramePool pool_;
  Expander expander_;
  Positions in_, out_;
  std::vector<std::vector<Stack>> states_;
  std::vector<std::unique_ptr<std::array<int32_t, 256>>> table_;
  absl::flat_hash_map<std::string, int32_t> ids_;
};

inline bool TestBit(const std::vector<uint32_t>& words, int32_t id) {
  return (words[static_cast<size_t>(id) / 32] >> (static_cast<uint32_t>(id) % 32)) & 1u;
}

}  // namespace

absl::StatusOr<std::unique_ptr<const TokenIndex>> TokenIndex::Build(const Automaton& automaton,
                                                                    const Vocabulary& vocabulary,
                                                                    const IndexLimits& limits) {
  auto index = std::unique_ptr<TokenIndex>(new TokenIndex());
  index->nodes_.resize(static_cast<size_t>(automaton.num_nodes()));
  PositionsDfa dfa(&automaton, limits.max_stacks);
  const ByteTrie& vocab_trie = vocabulary.trie();
  const auto trie = vocab_trie.nodes();
  const int32_t num_words = vocabulary.num_words();
  std::vector<int32_t> state_at_depth;
  std::vector<int32_t> exits;
  std::vector<uint32_t> accepted_bits(static_cast<size_t>(num_words));
  std::vector<std::pair<std::string_view, int32_t>> suffixes;
  int64_t steps = 0;
  for (int32_t n = 0; n < automaton.num_nodes(); ++n) {
    if (!automaton.reads_bytes(n)) continue;
    exits.clear();
    std::fill(accepted_bits.begin(), accepted_bits.end(), 0u);
    int64_t num_accepted = 0;
    state_at_depth.assign(1, dfa.Start(n));
    const int32_t end = static_cast<int32_t>(trie.size());
    for (int32_t i = 1; i < end;) {
      const ByteTrie::Node& t = trie[static_cast<size_t>(i)];
      const int32_t packed = dfa.Advance(state_at_depth[static_cast<size_t>(t.depth - 1)], t.byte);
      if (packed == PositionsDfa::kUnknown) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the grammar is too ambiguous to index: more than ", limits.max_stacks, " parse positions at once"));
      }
      if (++steps > limits.max_walk_steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the grammar is too large to index for this vocabulary (more than ", limits.max_walk_steps,
            " trie steps)"));
      }
      const int32_t next = packed >> 1;
      const bool exited = (packed & 1) != 0;
      if (next != 0 || exited) {
        for (int32_t id : vocab_trie.ids_at(t)) {
          accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
          ++num_accepted;
        }
      }
      if (exited && t.subtree_end > i + 1) exits.push_back(i);
      if (next != 0) {
        if (state_at_depth.size() <= static_cast<size_t>(t.depth)) state_at_depth.resize(static_cast<size_t>(t.depth) + 1);
        state_at_depth[static_cast<size_t>(t.depth)] = next;
        ++i;
      } else {
        i = t.subtree_end;
      }
    }
    NodeTokens& out = index->nodes_[static_cast<size_t>(n)];
    if (num_accepted > num_words) {
      out.accepted_bits = accepted_bits;
    } else {
      for (int32_t w = 0; w < num_words; ++w) {
        for (uint32_t bits = accepted_bits[static_cast<size_t>(w)]; bits != 0; bits &= bits - 1) {
          out.accepted.push_back(w * 32 + __builtin_ctz(bits));
        }
      }
    }
    // Uncertain: below an exit, the tokens not already accepted.
    if (static_cast<int32_t>(exits.size()) <= limits.max_exit_points) {
      out.exit_points = exits;
    } else {
      suffixes.clear();
      for (int32_t e : exits) {
        const ByteTrie::Node& at = trie[static_cast<size_t>(e)];
        for (int32_t j = e + 1; j < at.subtree_end; ++j) {
          for (int32_t id : vocab_trie.ids_at(trie[static_cast<size_t>(j)])) {
            if (TestBit(accepted_bits, id)) continue;
            suffixes.emplace_back(vocabulary.bytes(id).substr(static_cast<size_t>(at.depth)), id);
          }
        }
      }
      if (!suffixes.empty()) out.suffixes = ByteTrie::Build(std::move(suffixes));
      suffixes = {};
    }
    index->memory_bytes_ += out.accepted.size() * sizeof(int32_t) + out.accepted_bits.size() * sizeof(uint32_t) +
                            out.exit_points.size() * sizeof(int32_t) + out.suffixes.memory_bytes();
  }
  index->walk_steps_ = steps;
  return std::unique_ptr<const TokenIndex>(std::move(index));
}

}  // namespace kvtier::grammar
