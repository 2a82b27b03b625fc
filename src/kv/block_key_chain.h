// BlockKeyChain: the keys of one token sequence's full blocks under one scope, each
// computed once. A waiting sequence's prompt is matched against the cache every step
// (read-ahead, prefix match), and a SHA-256 per block per step would add up on long
// prompts; the chain keeps what it computed. Owned by one sequence; not thread-safe.
#ifndef KVTIER_KV_BLOCK_KEY_CHAIN_H_
#define KVTIER_KV_BLOCK_KEY_CHAIN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_hash.h"

namespace kvtier {

class BlockKeyChain {
 public:
  explicit BlockKeyChain(const BlockHash& scope) : scope_(scope) {}

  const BlockHash& scope() const { return scope_; }

  // The key of full block i (tokens [i * block_tokens, (i + 1) * block_tokens)) of
  // `tokens`, computing those before it first. Every call must pass the same block_tokens
  // and tokens that extend those of earlier calls (a sequence's tokens only grow), which
  // is what makes a computed key valid for later calls.
  const BlockHash& Key(std::span<const int32_t> tokens, int64_t block_tokens, int64_t i) {
    while (static_cast<int64_t>(keys_.size()) <= i) {
      const size_t n = keys_.size();
      const BlockHash* parent = n == 0 ? nullptr : &keys_[n - 1];
      const BlockHash key = BlockHash::Chain(
          scope_, parent, tokens.subspan(n * static_cast<size_t>(block_tokens), static_cast<size_t>(block_tokens)));
      keys_.push_back(key);
    }
    return keys_[static_cast<size_t>(i)];
  }

 private:
  BlockHash scope_;
  std::vector<BlockHash> keys_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_BLOCK_KEY_CHAIN_H_
