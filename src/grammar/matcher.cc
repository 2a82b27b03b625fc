// Matcher (matcher.h).
#include "grammar/matcher.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kvtier::grammar {
namespace {

// Frames beyond this many (live or left over from mask walks) trigger a compaction.
constexpr size_t kCompactFramesAbove = 1 << 16;

inline void SetBit(std::span<uint32_t> words, int32_t id) {
  words[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::vector<int32_t> end_tokens, int32_t max_stacks)
    : grammar_(std::move(grammar)),
      end_tokens_(std::move(end_tokens)),
      expander_(&grammar_->automaton(), &pool_, max_stacks) {
  std::sort(end_tokens_.begin(), end_tokens_.end());
  end_tokens_.erase(std::unique(end_tokens_.begin(), end_tokens_.end()), end_tokens_.end());
  const Automaton& a = grammar_->automaton();
  if (!expander_.Expand(Stack{a.start(a.root_rule()), FramePool::kBottom}, &positions_)) {
    Fail(absl::ResourceExhaustedError("grammar: too many parse positions at the start"));
  }
}

void Matcher::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

bool Matcher::AcceptToken(int32_t id) {
  if (!status_.ok() || terminated()) return false;
  if (std::binary_search(end_tokens_.begin(), end_tokens_.end(), id)) {
    if (!positions_.exited) return false;
    ended_ = true;
    return true;
  }
  const Vocabulary& vocab = grammar_->vocabulary();
  if (id < 0 || id >= vocab.size() || !vocab.is_text(id)) return false;
  Positions* cur = &positions_;
  for (char c : vocab.bytes(id)) {
    if (cur->stacks.empty()) return false;
    if (!expander_.Advance(*cur, static_cast<uint8_t>(c), &next_)) {
      Fail(absl::ResourceExhaustedError(absl::StrCat(
          "grammar: more than the limit of parse positions after token ", id, " (the grammar is too ambiguous)")));
      return false;
    }
    if (next_.empty()) return false;
    std::swap(parent_, next_);  // parent_ is scratch here: the positions read so far
    cur = &parent_;
  }
  std::swap(positions_, parent_);
  if (pool_.size() > kCompactFramesAbove) CompactFrames();
  return true;
}

void Matcher::FillMask(std::span<uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  if (!status_.ok() || terminated()) return;
  const TokenIndex& index = grammar_->index();
  nodes_done_.clear();
  for (const Stack& s : positions_.stacks) {
    const NodeTokens& tokens = index.at(s.node);
    if (std::find(nodes_done_.begin(), nodes_done_.end(), s.node) == nodes_done_.end()) {
      nodes_done_.push_back(s.node);
      if (!tokens.accepted_bits.empty()) {
        for (size_t w = 0; w < tokens.accepted_bits.size(); ++w) words[w] |= tokens.accepted_bits[w];
      } else {
        for (int32_t id : tokens.accepted) SetBit(words, id);
      }
    }
    if (!tokens.has_uncertain() || s.frame == FramePool::kBottom) continue;
    // What the frames below read once this node's rule has ended.
    if (!expander_.Expand(Stack{pool_.return_node(s.frame), pool_.parent(s.frame)}, &parent_)) continue;
    if (parent_.stacks.empty()) continue;
    first_bytes_.fill(0);
    for (const Stack& p : parent_.stacks) {
      for (const Automaton::ByteEdge& e : grammar_->automaton().edges(p.node)) {
        for (int b = e.lo; b <= e.hi; ++b) first_bytes_[static_cast<size_t>(b) / 64] |= uint64_t{1} << (b % 64);
      }
    }
    if (!tokens.suffixes.empty()) {
      MarkSubtree(tokens.suffixes, 1, static_cast<int32_t>(tokens.suffixes.nodes().size()), 0, parent_, words);
    }
    const ByteTrie& vocab_trie = grammar_->vocabulary().trie();
    for (int32_t e : tokens.exit_points) {
      const ByteTrie::Node& at = vocab_trie.nodes()[static_cast<size_t>(e)];
      MarkSubtree(vocab_trie, e + 1, at.subtree_end, at.depth, parent_, words);
    }
  }
  if (positions_.exited) {
    for (int32_t id : end_tokens_) {
      if (id >= 0 && static_cast<size_t>(id) / 32 < words.size()) SetBit(words, id);
    }
  }
}

void Matcher::MarkSubtree(const ByteTrie& trie, int32_t begin, int32_t end, int32_t base_depth,
                          const Positions& from, std::span<uint32_t> words) {
  const auto nodes = trie.nodes();
  if (depth_positions_.empty()) depth_positions_.resize(1);
  depth_positions_[0] = from;
  for (int32_t i = begin; i < end;) {
    const ByteTrie::Node& n = nodes[static_cast<size_t>(i)];
    const auto d = static_cast<size_t>(n.depth - base_depth);
    // The first byte is checked against what the positions can read before expanding.
    if (d == 1 && ((first_bytes_[n.byte / 64] >> (n.byte % 64)) & 1u) == 0) {
      i = n.subtree_end;
      continue;
    }
    if (depth_positions_.size() <= d) depth_positions_.resize(d + 1);
    const bool ok = expander_.Advance(depth_positions_[d - 1], n.byte, &depth_positions_[d]);
    const Positions& here = depth_positions_[d];
    if (ok && !here.empty()) {
      for (int32_t id : trie.ids_at(n)) SetBit(words, id);
    }
    if (ok && !here.stacks.empty()) {
      ++i;
    } else {
      i = n.subtree_end;
    }
  }
}

void Matcher::CompactFrames() {
  // Frames only point at older frames, so rebuilding them oldest first keeps parents ahead.
  std::vector<int32_t> live;
  absl::flat_hash_map<int32_t, int32_t> remap;
  for (const Stack& s : positions_.stacks) {
    for (int32_t f = s.frame; f != FramePool::kBottom && !remap.contains(f); f = pool_.parent(f)) {
      remap.emplace(f, 0);
      live.push_back(f);
    }
  }
  std::sort(live.begin(), live.end());
  FramePool fresh;
  remap[FramePool::kBottom] = FramePool::kBottom;
  for (int32_t f : live) remap[f] = fresh.Push(pool_.return_node(f), remap.at(pool_.parent(f)));
  for (Stack& s : positions_.stacks) s.frame = remap.at(s.frame);
  std::sort(positions_.stacks.begin(), positions_.stacks.end());
  pool_ = std::move(fresh);
}

}  // namespace kvtier::grammar
