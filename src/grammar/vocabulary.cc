// Vocabulary: token bytes and their trie (vocabulary.h).
#include "grammar/vocabulary.h"

namespace kvtier::grammar {
namespace {

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::shared_ptr<const Vocabulary> Vocabulary::Create(std::vector<std::optional<std::string>> token_bytes) {
  auto v = std::shared_ptr<Vocabulary>(new Vocabulary());
  v->bytes_.reserve(token_bytes.size());
  uint64_t h = 0xcbf29ce484222325ull;
  for (auto& b : token_bytes) {
    v->bytes_.push_back(b.has_value() ? std::move(*b) : std::string());
    const uint64_t n = v->bytes_.back().size();
    h = Fnv1a(h, &n, sizeof n);
    h = Fnv1a(h, v->bytes_.back().data(), v->bytes_.back().size());
  }
  v->fingerprint_ = h;
  std::vector<std::pair<std::string_view, int32_t>> entries;
  for (int32_t id = 0; id < v->size(); ++id) {
    if (v->is_text(id)) entries.emplace_back(v->bytes_[static_cast<size_t>(id)], id);
  }
  v->trie_ = ByteTrie::Build(std::move(entries));
  return v;
}

}  // namespace kvtier::grammar
