// ByteTrie: a trie over byte strings, each ending at a node that lists its ids, stored in
// preorder. Sorted string order is preorder, so a node's subtree is the index range
// [index, subtree_end) and a walk skips a subtree by jumping to subtree_end. Used for the
// vocabulary (all token strings) and for the per-node suffix sets of the token index.
// Immutable after Build; thread-safe.
#ifndef KVTIER_GRAMMAR_BYTE_TRIE_H_
#define KVTIER_GRAMMAR_BYTE_TRIE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier::grammar {

class ByteTrie {
 public:
  struct Node {
    uint8_t byte = 0;         // the byte read to enter this node (none for the root)
    int32_t depth = 0;        // bytes from the root
    int32_t subtree_end = 0;  // one past the last node below this one
    int32_t ids_begin = 0, ids_end = 0;  // ids whose string ends exactly here
  };

  // entries: (string, id) pairs; sorted here. Empty strings attach to the root.
  static ByteTrie Build(std::vector<std::pair<std::string_view, int32_t>> entries);

  std::span<const Node> nodes() const { return nodes_; }
  std::span<const int32_t> ids() const { return ids_; }
  std::span<const int32_t> ids_at(const Node& n) const {
    return std::span<const int32_t>(ids_).subspan(static_cast<size_t>(n.ids_begin),
                                                   static_cast<size_t>(n.ids_end - n.ids_begin));
  }
  // True when no string is stored.
  bool empty() const { return ids_.empty(); }
  size_t memory_bytes() const { return nodes_.size() * sizeof(Node) + ids_.size() * sizeof(int32_t); }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_BYTE_TRIE_H_
