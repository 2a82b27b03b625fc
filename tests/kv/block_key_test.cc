// Block keys (kv/block_hash.h): SHA-256 over the scope (model, KV layout and format, cache
// namespace), the parent key and the tokens. Two token blocks that collide under the 64-bit
// FNV-1a chain kvtier used before have distinct keys now; every input changes the key; the
// key chain a sequence keeps computes the same keys; namespaces are validated.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv/block_hash.h"
#include "kv/block_key_chain.h"
#include "model/stable_hash.h"

namespace kvtier {
namespace {

// The block identity kvtier used before SHA-256 keys, verbatim: a 64-bit FNV-1a chain of
// (model fingerprint, parent hash, tokens). Kept here only to show its collisions.
uint64_t OldFnvChain(const uint64_t* parent, std::span<const int32_t> tokens, uint64_t model_fingerprint) {
  uint64_t state = Fnv1a64(&model_fingerprint, sizeof model_fingerprint);
  const uint64_t parent_value = parent != nullptr ? *parent : 0;
  const uint8_t has_parent = parent != nullptr ? 1 : 0;
  state = Fnv1a64(&has_parent, 1, state);
  state = Fnv1a64(&parent_value, sizeof parent_value, state);
  state = Fnv1a64(tokens.data(), tokens.size_bytes(), state);
  return SplitMix64(state);
}

// Two 16-token blocks with the same old key under model fingerprint 42 as a first block
// (no parent), found by tests/kv/tools/find_fnv_collision.cc (a distinguished-point
// collision search over the last eight tokens, each 0-255: about 2^32 FNV evaluations).
// Any prompt starting with one of them would have been served the other's KV.
// (Found after 5.0e9 evaluations; both reach FNV state 0xb39d6d3adcadc00b.)
const std::vector<int32_t> kCollidingA = {1, 2, 3, 4, 5, 6, 7, 8, 157, 162, 195, 214, 156, 223, 220, 43};
const std::vector<int32_t> kCollidingB = {1, 2, 3, 4, 5, 6, 7, 8, 250, 24, 98, 161, 149, 7, 206, 51};

KvLayout Layout() {
  KvLayout layout;
  layout.num_layers = 2;
  layout.num_kv_heads = 2;
  layout.head_dim = 8;
  layout.block_tokens = 16;
  layout.dtype = DType::kF32;
  return layout;
}

TEST(BlockKeyTest, OldFnvCollisionIsTwoKeysNow) {
  ASSERT_NE(kCollidingA, kCollidingB);
  EXPECT_EQ(OldFnvChain(nullptr, kCollidingA, 42), OldFnvChain(nullptr, kCollidingB, 42));
  const BlockHash scope = BlockKeyScope(42, Layout(), "");
  const BlockHash a = BlockHash::Chain(scope, nullptr, kCollidingA);
  const BlockHash b = BlockHash::Chain(scope, nullptr, kCollidingB);
  EXPECT_NE(a, b);
  // And the blocks after them: the old chain carried the collision on (equal parents).
  const std::vector<int32_t> next(16, 7);
  const uint64_t old_a = OldFnvChain(nullptr, kCollidingA, 42), old_b = OldFnvChain(nullptr, kCollidingB, 42);
  EXPECT_EQ(OldFnvChain(&old_a, next, 42), OldFnvChain(&old_b, next, 42));
  EXPECT_NE(BlockHash::Chain(scope, &a, next), BlockHash::Chain(scope, &b, next));
}

TEST(BlockKeyTest, Sha256KnownAnswer) {
  // FIPS 180-2 example: SHA-256("abc").
  EXPECT_EQ(Sha256::Of("abc", 3).Hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.Update("a", 1).Update("bc", 2);
  EXPECT_EQ(h.Finish(), Sha256::Of("abc", 3));
  EXPECT_EQ(h.Finish(), Sha256::Of("", 0));  // Finish starts over
}

TEST(BlockKeyTest, EveryInputChangesTheKey) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const BlockHash scope = BlockKeyScope(42, Layout(), "");
  const BlockHash key = BlockHash::Chain(scope, nullptr, tokens);
  EXPECT_EQ(key, BlockHash::Chain(BlockKeyScope(42, Layout(), ""), nullptr, tokens));  // stable
  std::vector<BlockHash> others;
  others.push_back(BlockHash::Chain(BlockKeyScope(43, Layout(), ""), nullptr, tokens));
  for (int field = 0; field < 5; ++field) {
    KvLayout layout = Layout();
    if (field == 0) layout.num_layers = 3;
    if (field == 1) layout.num_kv_heads = 1;
    if (field == 2) layout.head_dim = 16;
    if (field == 3) layout.block_tokens = 32;
    if (field == 4) layout.dtype = DType::kBF16;
    others.push_back(BlockHash::Chain(BlockKeyScope(42, layout, ""), nullptr, tokens));
  }
  others.push_back(BlockHash::Chain(BlockKeyScope(42, Layout(), "tenant"), nullptr, tokens));
  others.push_back(BlockHash::Chain(scope, &key, tokens));  // a parent
  others.push_back(BlockHash::Chain(scope, nullptr, std::vector<int32_t>{1, 2, 4, 3}));
  others.push_back(BlockHash::Chain(scope, nullptr, std::vector<int32_t>{1, 2, 3}));
  others.push_back(BlockHash::Chain(scope, nullptr, std::vector<int32_t>{1, 2, 3, 4, 0}));
  // A zero parent is not "no parent".
  const BlockHash zero{};
  others.push_back(BlockHash::Chain(scope, &zero, tokens));
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_NE(others[i], key) << i;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(others[i], others[j]) << i << " " << j;
  }
  // Namespaces are length-prefixed: "ab" + no tokens is not "a" + a token of "b".
  EXPECT_NE(BlockKeyScope(42, Layout(), "ab"), BlockKeyScope(42, Layout(), "a"));
}

TEST(BlockKeyTest, KeyChainComputesTheChain) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 40; ++i) tokens.push_back(i * 3);
  const BlockHash scope = BlockKeyScope(7, Layout(), "ns");
  BlockKeyChain chain(scope);
  EXPECT_EQ(chain.scope(), scope);
  const BlockHash k0 = BlockHash::Chain(scope, nullptr, std::span(tokens).subspan(0, 16));
  const BlockHash k1 = BlockHash::Chain(scope, &k0, std::span(tokens).subspan(16, 16));
  EXPECT_EQ(chain.Key(tokens, 16, 1), k1);  // computes block 0 on the way
  EXPECT_EQ(chain.Key(tokens, 16, 0), k0);
  tokens.push_back(99);  // the sequence grows: earlier keys stay valid
  EXPECT_EQ(chain.Key(tokens, 16, 1), k1);
}

TEST(BlockKeyTest, CacheNamespaceValidation) {
  EXPECT_TRUE(ValidateCacheNamespace("").ok());
  EXPECT_TRUE(ValidateCacheNamespace("tenant-42/üñï").ok());
  EXPECT_TRUE(ValidateCacheNamespace(std::string(kMaxCacheNamespaceBytes, 'x')).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateCacheNamespace(std::string(kMaxCacheNamespaceBytes + 1, 'x'))));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateCacheNamespace(std::string("a\0b", 3))));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateCacheNamespace("\xff")));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateCacheNamespace("\xc0\xaf")));      // overlong
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateCacheNamespace("\xed\xa0\x80")));  // surrogate
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateCacheNamespace("\xe2\x82")));      // truncated
}

}  // namespace
}  // namespace kvtier
