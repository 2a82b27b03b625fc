// Matcher: one sequence's progress through a compiled grammar — the set of parse positions
// after the tokens accepted so far — and the mask of tokens allowed next.
//
// FillMask ORs, for each position, its node's accepted tokens from the TokenIndex and
// checks that node's uncertain tokens (those whose remaining bytes depend on the frames
// below) by walking their suffix trie from the real frames. End tokens (eos) are allowed
// exactly when the text so far is a complete sentence of the grammar. A matcher that
// overflowed a limit allows nothing and says why (status()).
// Not thread-safe: one thread at a time (the engine's mask thread during a forward, the
// stepping thread at commit); distinct matchers are independent.
#ifndef KVTIER_GRAMMAR_MATCHER_H_
#define KVTIER_GRAMMAR_MATCHER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/stack.h"

namespace kvtier::grammar {

class Matcher {
 public:
  // end_tokens: ids that end the text (the model's eos, stop ids); they are allowed, and
  // accepted, only when the grammar is complete.
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::vector<int32_t> end_tokens,
          int32_t max_stacks = 1024);

  // Reads the token: true when the grammar allows it here (the state advances), false
  // when it does not (the state is unchanged).
  bool AcceptToken(int32_t id);
  // words: vocabulary().num_words() words; bit id%32 of word id/32 set = id allowed.
  void FillMask(std::span<uint32_t> words);

  // The text so far is a complete sentence (end tokens are allowed).
  bool accepting() const { return positions_.exited && status_.ok(); }
  // Nothing more may follow: an end token was accepted, or the sentence is complete and
  // cannot be extended.
  bool terminated() const { return ended_ || (positions_.stacks.empty() && positions_.exited); }
  // Not OK after a limit was exceeded (too many parse positions): nothing is allowed.
  const absl::Status& status() const { return status_; }
  const CompiledGrammar& grammar() const { return *grammar_; }
  // Parse positions held now (for tests and statistics).
  size_t num_positions() const { return positions_.stacks.size(); }

 private:
  // Marks the tokens of trie nodes [begin, end) (a subtree below a node at base_depth)
  // whose remaining bytes, read from the positions of `from`, keep the text viable.
  void MarkSubtree(const ByteTrie& trie, int32_t begin, int32_t end, int32_t base_depth, const Positions& from,
                   std::span<uint32_t> words);
  void Fail(absl::Status status);
  // Rebuilds the frame pool with only the frames the current positions use.
  void CompactFrames();

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<int32_t> end_tokens_;  // sorted
  FramePool pool_;
  Expander expander_;
  Positions positions_;
  bool ended_ = false;
  absl::Status status_;
  // Scratch (reused, never shrunk).
  Positions next_, parent_;
  std::vector<Positions> depth_positions_;
  std::vector<int32_t> nodes_done_;
  std::array<uint64_t, 4> first_bytes_{};  // bytes the positions of parent_ can read
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_MATCHER_H_
