// Stable 64-bit hashing (FNV-1a, splitmix64): the same value on every run, build and host,
// unlike absl::Hash. Used for checkpoint fingerprints and counter-based random weights.
// Pure functions; thread-safe.
#ifndef KVTIER_MODEL_STABLE_HASH_H_
#define KVTIER_MODEL_STABLE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvtier {

inline constexpr uint64_t kFnv64Offset = 0xcbf29ce484222325ull;

// FNV-1a 64 continued from `state`: Fnv1a64(b, Fnv1a64(a)) == Fnv1a64(a + b).
inline uint64_t Fnv1a64(const void* data, size_t size, uint64_t state = kFnv64Offset) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    state ^= p[i];
    state *= 0x100000001b3ull;
  }
  return state;
}

inline uint64_t Fnv1a64(std::string_view text, uint64_t state = kFnv64Offset) {
  return Fnv1a64(text.data(), text.size(), state);
}

// splitmix64 finaliser: a bijective mix, good enough to turn a counter into random bits.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace kvtier

#endif  // KVTIER_MODEL_STABLE_HASH_H_
