// TokenIndex::Build: one vocabulary-trie walk per byte-reading node (token_index.h).
#include "grammar/token_index.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>

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

// One node's walk and its result. Scratch is reused across nodes of one thread.
struct WalkScratch {
  std::vector<int32_t> state_at_depth;
  std::vector<int32_t> exits;
  std::vector<uint32_t> accepted_bits;
  std::vector<std::pair<std::string_view, int32_t>> suffixes;
};

absl::Status IndexNode(int32_t n, const Vocabulary& vocabulary, const IndexLimits& limits, PositionsDfa& dfa,
                       std::atomic<int64_t>& steps, WalkScratch& w, NodeTokens* out) {
  const ByteTrie& vocab_trie = vocabulary.trie();
  const auto trie = vocab_trie.nodes();
  const int32_t num_words = vocabulary.num_words();
  w.exits.clear();
  w.accepted_bits.assign(static_cast<size_t>(num_words), 0u);
  int64_t num_accepted = 0, local_steps = 0;
  w.state_at_depth.assign(1, dfa.Start(n));
  const int32_t end = static_cast<int32_t>(trie.size());
  for (int32_t i = 1; i < end;) {
    const ByteTrie::Node& t = trie[static_cast<size_t>(i)];
    const int32_t packed = dfa.Advance(w.state_at_depth[static_cast<size_t>(t.depth - 1)], t.byte);
    if (packed == PositionsDfa::kUnknown) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the grammar is too ambiguous to index: more than ", limits.max_stacks, " parse positions at once"));
    }
    // The budget is shared by all the walks (and threads); checked in batches.
    if (++local_steps == 4096) {
      if (steps.fetch_add(local_steps) + local_steps > limits.max_walk_steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the grammar is too large to index for this vocabulary (more than ", limits.max_walk_steps,
            " trie steps)"));
      }
      local_steps = 0;
    }
    const int32_t next = packed >> 1;
    const bool exited = (packed & 1) != 0;
    if (next != 0 || exited) {
      for (int32_t id : vocab_trie.ids_at(t)) {
        w.accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
        ++num_accepted;
      }
    }
    if (exited && t.subtree_end > i + 1) w.exits.push_back(i);
    if (next != 0) {
      if (w.state_at_depth.size() <= static_cast<size_t>(t.depth)) w.state_at_depth.resize(static_cast<size_t>(t.depth) + 1);
      w.state_at_depth[static_cast<size_t>(t.depth)] = next;
      ++i;
    } else {
      i = t.subtree_end;
    }
  }
  steps.fetch_add(local_steps);
  if (num_accepted > num_words) {
    out->accepted_bits = w.accepted_bits;
  } else {
    for (int32_t word = 0; word < num_words; ++word) {
      for (uint32_t bits = w.accepted_bits[static_cast<size_t>(word)]; bits != 0; bits &= bits - 1) {
        out->accepted.push_back(word * 32 + __builtin_ctz(bits));
      }
    }
  }
  // Uncertain: below an exit, the tokens not already accepted.
  if (static_cast<int32_t>(w.exits.size()) <= limits.max_exit_points) {
    out->exit_points = w.exits;
    return absl::OkStatus();
  }
  w.suffixes.clear();
  for (int32_t e : w.exits) {
    const ByteTrie::Node& at = trie[static_cast<size_t>(e)];
    for (int32_t j = e + 1; j < at.subtree_end; ++j) {
      for (int32_t id : vocab_trie.ids_at(trie[static_cast<size_t>(j)])) {
        if (TestBit(w.accepted_bits, id)) continue;
        w.suffixes.emplace_back(vocabulary.bytes(id).substr(static_cast<size_t>(at.depth)), id);
      }
    }
  }
  if (!w.suffixes.empty()) out->suffixes = ByteTrie::Build(std::move(w.suffixes));
  w.suffixes = {};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<const TokenIndex>> TokenIndex::Build(const Automaton& automaton,
                                                                    const Vocabulary& vocabulary,
                                                                    const IndexLimits& limits) {
  auto index = std::unique_ptr<TokenIndex>(new TokenIndex());
  index->nodes_.resize(static_cast<size_t>(automaton.num_nodes()));
  std::vector<int32_t> nodes;
  for (int32_t n = 0; n < automaton.num_nodes(); ++n) {
    if (automaton.reads_bytes(n)) nodes.push_back(n);
  }
  // Nodes are independent: spread over threads (interleaved, since the costly ones — wide
  // character classes — sit next to each other), each with its own DFA cache.
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t num_threads = std::clamp<size_t>(
      std::min({static_cast<size_t>(std::max(limits.max_threads, 1)), cores, nodes.size() / 16}), 1, nodes.size() + 1);
  std::atomic<int64_t> steps{0};
  std::vector<absl::Status> status(num_threads);
  auto work = [&](size_t t) {
    PositionsDfa dfa(&automaton, limits.max_stacks);
    WalkScratch scratch;
    for (size_t i = t; i < nodes.size(); i += num_threads) {
      status[t] = IndexNode(nodes[i], vocabulary, limits, dfa, steps, scratch,
                            &index->nodes_[static_cast<size_t>(nodes[i])]);
      if (!status[t].ok()) return;
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < num_threads; ++t) threads.emplace_back(work, t);
  work(0);
  for (std::thread& th : threads) th.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  for (const NodeTokens& out : index->nodes_) {
    index->memory_bytes_ += out.accepted.size() * sizeof(int32_t) + out.accepted_bits.size() * sizeof(uint32_t) +
                            out.exit_points.size() * sizeof(int32_t) + out.suffixes.memory_bytes();
  }
  index->walk_steps_ = steps.load();
  return std::unique_ptr<const TokenIndex>(std::move(index));
}

}  // namespace kvtier::grammar
