// ByteTrie::Build (byte_trie.h).
#include "grammar/byte_trie.h"

#include <algorithm>

namespace kvtier::grammar {

ByteTrie ByteTrie::Build(std::vector<std::pair<std::string_view, int32_t>> entries) {
  std::sort(entries.begin(), entries.end());
  ByteTrie t;
  t.nodes_.push_back(Node{});
  // `open`: the path from the root to the previous string's node.
  std::vector<int32_t> open = {0};
  std::string_view previous;
  auto close_to = [&](size_t depth) {
    while (open.size() > depth + 1) {
      t.nodes_[static_cast<size_t>(open.back())].subtree_end = static_cast<int32_t>(t.nodes_.size());
      open.pop_back();
    }
  };
  for (const auto& [s, id] : entries) {
    size_t common = 0;
    while (common < s.size() && common < previous.size() && s[common] == previous[common]) ++common;
    close_to(common);
    for (size_t i = common; i < s.size(); ++i) {
      Node node;
      node.byte = static_cast<uint8_t>(s[i]);
      node.depth = static_cast<int32_t>(i + 1);
      node.ids_begin = node.ids_end = static_cast<int32_t>(t.ids_.size());
      t.nodes_.push_back(node);
      open.push_back(static_cast<int32_t>(t.nodes_.size() - 1));
    }
    Node& last = t.nodes_[static_cast<size_t>(open.back())];
    if (last.ids_end == last.ids_begin) last.ids_begin = static_cast<int32_t>(t.ids_.size());
    t.ids_.push_back(id);
    last.ids_end = static_cast<int32_t>(t.ids_.size());
    previous = s;
  }
  close_to(0);
  t.nodes_[0].subtree_end = static_cast<int32_t>(t.nodes_.size());
  return t;
}

}  // namespace kvtier::grammar
