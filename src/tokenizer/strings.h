// String glue: this abseil's absl::string_view is its own type, not std::string_view, so
// the tokenizer converts at abseil calls (Av) and keys its hash maps with transparent
// std::string_view hashing (heterogeneous lookup without allocating). Stateless; thread-safe.
#ifndef KVTIER_TOKENIZER_STRINGS_H_
#define KVTIER_TOKENIZER_STRINGS_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"

namespace kvtier::tokenizer {

// SentencePiece's word boundary, U+2581 "▁", which stands for a space in its pieces.
inline constexpr std::string_view kSpieceUnderline = "\xE2\x96\x81";

inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

template <typename V>
using StringMap = absl::flat_hash_map<std::string, V, StringViewHash, StringViewEq>;
using StringSet = absl::flat_hash_set<std::string, StringViewHash, StringViewEq>;

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_STRINGS_H_
