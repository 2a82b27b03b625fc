// Finds two 16-token KV blocks whose keys collide under the 64-bit FNV-1a chain kvtier used
// before SHA-256 block keys (kept in tests/kv/block_key_test.cc as OldFnvChain), for model
// fingerprint 42 and no parent block: the colliding arrays committed in that test come from
// this program. Not part of the build: `cmake --build <dir> --target find_fnv_collision`.
//
// Method: parallel collision search with distinguished points (van Oorschot and Wiener).
// Tokens 0-7 are fixed; tokens 8-15 are the eight bytes of a 64-bit x (each token 0-255, so
// both blocks are valid for any model with a vocabulary of 256 or more). f(x) = the FNV
// state after the block's tokens, which the old key only passes through a bijective mix
// (SplitMix64), so a collision of f between x != y is a collision of the old keys. A walk
// x, f(x), f(f(x)), ... ends at a distinguished point (low kDistinguishedBits bits zero);
// two walks ending at the same point merged somewhere, and replaying them from their starts
// finds where. Expected work: about 1.25 * 2^32 evaluations of f (a minute on one core).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <random>
#include <unordered_map>

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr int kDistinguishedBits = 20;
constexpr int32_t kFixedTokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};

uint64_t Fnv(const void* data, size_t n, uint64_t state) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) state = (state ^ p[i]) * kFnvPrime;
  return state;
}

// The old chain's state before the variable tokens: fingerprint, has_parent 0, parent 0,
// tokens 0-7.
uint64_t PrefixState() {
  const uint64_t fingerprint = 42;
  uint64_t state = Fnv(&fingerprint, 8, kFnvOffset);
  const uint8_t has_parent = 0;
  state = Fnv(&has_parent, 1, state);
  const uint64_t parent = 0;
  state = Fnv(&parent, 8, state);
  return Fnv(kFixedTokens, sizeof kFixedTokens, state);
}

// A token t < 256 is the bytes (t, 0, 0, 0): FNV-1a takes it as (s ^ t) * P^4.
uint64_t F(uint64_t prefix, uint64_t x) {
  constexpr uint64_t kP4 = kFnvPrime * kFnvPrime * kFnvPrime * kFnvPrime;
  uint64_t s = prefix;
  for (int i = 0; i < 8; ++i) s = (s ^ ((x >> (8 * i)) & 0xff)) * kP4;
  return s;
}

bool Distinguished(uint64_t x) { return (x & ((1ull << kDistinguishedBits) - 1)) == 0; }

struct Trail {
  uint64_t start;
  uint64_t length;
};

}  // namespace

int main() {
  const uint64_t prefix = PrefixState();
  std::mt19937_64 rng(20261201);
  std::unordered_map<uint64_t, Trail> ends;  // distinguished point -> the walk that reached it
  const uint64_t max_length = 40ull << kDistinguishedBits;
  uint64_t evaluations = 0;
  while (true) {
    const uint64_t start = rng();
    uint64_t x = start, length = 0;
    while (!Distinguished(x) && length < max_length) {
      x = F(prefix, x);
      ++length;
    }
    evaluations += length;
    if (!Distinguished(x)) continue;  // a cycle without a distinguished point
    auto [it, fresh] = ends.emplace(x, Trail{start, length});
    if (fresh) continue;
    // Two walks to the same point: walk the longer one ahead, then both until they meet.
    Trail a = it->second, b{start, length};
    if (a.length < b.length) std::swap(a, b);
    uint64_t xa = a.start, xb = b.start;
    for (uint64_t i = 0; i < a.length - b.length; ++i) xa = F(prefix, xa);
    if (xa == xb) continue;  // one walk started on the other
    while (F(prefix, xa) != F(prefix, xb)) {
      xa = F(prefix, xa);
      xb = F(prefix, xb);
    }
    if (xa == xb) continue;
    std::printf("after %" PRIu64 " evaluations: x = 0x%016" PRIx64 ", y = 0x%016" PRIx64 ", state 0x%016" PRIx64 "\n",
                evaluations, xa, xb, F(prefix, xa));
    for (uint64_t v : {xa, xb}) {
      std::printf("{");
      for (int32_t t : kFixedTokens) std::printf("%d, ", t);
      for (int i = 0; i < 8; ++i) std::printf("%d%s", static_cast<int>((v >> (8 * i)) & 0xff), i < 7 ? ", " : "}\n");
    }
    return 0;
  }
}
