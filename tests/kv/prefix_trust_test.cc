// The prefix cache never serves a block for other tokens: a hit whose stored tokens differ
// from the request's is refused (a miss, counted in prefix_token_mismatch) on every tier;
// sequences of different cache namespaces never share a block, in memory or on disk after
// a restart; and a namespace changes which blocks are shared, never a sequence's tokens.
// The mismatching state is built as a key collision would leave it: a key chain computed
// for tokens A hands its keys to the blocks of tokens B.
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kv/manager_fixture.h"
#include "kv/tier_test_util.h"

namespace kvtier {
namespace {

using testing::ManagerFixture;

constexpr int64_t kTrustBlockTokens = 4;

// One full block of each, plus a token to compute.
const std::vector<int32_t> kA = {1, 2, 3, 4, 9};
const std::vector<int32_t> kB = {5, 6, 7, 8, 9};

// Caches kB's block under kA's key (the state a collision of the two keys would make) as
// sequence 1, and releases it.
void CacheBUnderAsKey(ManagerFixture& f) {
  BlockKeyChain colliding = f.kv->KeyChain("");
  colliding.Key(kA, kTrustBlockTokens, 0);  // the chain now hands out A's key for block 0
  ASSERT_TRUE(f.kv->Reserve(1, 5).ok());
  f.Stamp(1);
  f.kv->OnComputed(1, kB, 4, 0, &colliding);
  f.kv->Release(1);
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
}

// Fills every device block with another sequence, evicting the cached ones, then frees it.
void EvictDevice(ManagerFixture& f, SequenceId seq) {
  const int64_t n = f.kv->num_device_blocks();
  ASSERT_TRUE(f.kv->Reserve(seq, n * kTrustBlockTokens).ok());
  f.kv->Release(seq);
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
}

TEST(PrefixTrustTest, DeviceHitWithOtherTokensIsRefused) {
  ManagerFixture f(/*device=*/8, /*host=*/0, /*disk=*/0, kTrustBlockTokens);
  CacheBUnderAsKey(f);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDevice).cached_blocks, 1);
  EXPECT_EQ(f.kv->MatchPrefix(2, kA), 0);  // A's key, B's tokens: refused
  EXPECT_EQ(f.kv->counters().prefix_token_mismatch, 1);
  EXPECT_EQ(f.kv->counters().prefix_hits[0], 0);
  EXPECT_TRUE(f.kv->BlockTable(2).empty());
  f.kv->Release(2);
  // B's own key was never cached: a plain miss, not a mismatch.
  EXPECT_EQ(f.kv->MatchPrefix(3, kB), 0);
  EXPECT_EQ(f.kv->counters().prefix_token_mismatch, 1);
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
}

TEST(PrefixTrustTest, HostHitWithOtherTokensIsRefused) {
  ManagerFixture f(/*device=*/8, /*host=*/8, /*disk=*/0, kTrustBlockTokens);
  CacheBUnderAsKey(f);
  f.kv->StartBackgroundCopies();  // written back to the host tier (a synchronous backend)
  EvictDevice(f, 9);
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDevice).cached_blocks, 0);
  ASSERT_EQ(f.kv->Stats().tier(Tier::kHost).cached_blocks, 1);
  EXPECT_EQ(f.kv->MatchPrefix(2, kA), 0);
  EXPECT_EQ(f.kv->counters().prefix_token_mismatch, 1);
  EXPECT_EQ(f.kv->counters().prefix_hits[1], 0);
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
}

TEST(PrefixTrustTest, DiskHitWithOtherTokensIsRefused) {
  ManagerFixture f(/*device=*/8, /*host=*/0, /*disk=*/16, kTrustBlockTokens);
  CacheBUnderAsKey(f);
  f.kv->FinishStep(/*idle=*/true);  // write-behind: on its way to disk
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  EvictDevice(f, 9);
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDevice).cached_blocks, 0);
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 1);
  EXPECT_EQ(f.kv->MatchPrefix(2, kA), 0);  // the slot header's tokens are B's: refused
  EXPECT_EQ(f.kv->counters().prefix_token_mismatch, 1);
  EXPECT_EQ(f.kv->counters().prefix_hits[2], 0);
  EXPECT_EQ(f.kv->counters().corrupt_blocks_detected, 0);
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
}

TEST(PrefixTrustTest, ReadAheadOfOtherTokensIsRefused) {
  ManagerFixture f(/*device=*/8, /*host=*/8, /*disk=*/16, kTrustBlockTokens);
  CacheBUnderAsKey(f);
  f.kv->FinishStep(/*idle=*/true);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  EvictDevice(f, 9);  // on disk already: evicted without a host copy
  ASSERT_EQ(f.kv->Stats().tier(Tier::kHost).cached_blocks, 0);
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 1);
  f.kv->ReadAhead(2, kA);
  f.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_EQ(f.kv->counters().prefix_token_mismatch, 1);
  EXPECT_EQ(f.kv->counters().disk.read_aheads, 0);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kHost).cached_blocks, 0);  // not a host copy
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
  EXPECT_EQ(f.kv->MatchPrefix(2, kA), 0);  // and refused again at its use
  EXPECT_EQ(f.kv->counters().prefix_token_mismatch, 2);
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
}

TEST(PrefixTrustTest, NamespacesNeverShareABlockInMemoryOrOnDisk) {
  ManagerFixture f(/*device=*/8, /*host=*/0, /*disk=*/16, kTrustBlockTokens);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // two full blocks
  BlockKeyChain tenant_a = f.kv->KeyChain("tenant-a");
  ASSERT_TRUE(f.kv->Reserve(1, 9).ok());
  f.Stamp(1);
  f.kv->OnComputed(1, tokens, 8, 0, &tenant_a);
  f.kv->Release(1);
  BlockKeyChain tenant_b = f.kv->KeyChain("tenant-b");
  BlockKeyChain tenant_a_again = f.kv->KeyChain("tenant-a");
  EXPECT_EQ(f.kv->MatchPrefix(2, tokens, 0, &tenant_b), 0);
  f.kv->Release(2);
  EXPECT_EQ(f.kv->MatchPrefix(3, tokens), 0);  // the default namespace is another one
  f.kv->Release(3);
  EXPECT_EQ(f.kv->MatchPrefix(4, tokens, 0, &tenant_a_again), 8);
  EXPECT_TRUE(f.Check(4, 1));
  f.kv->Release(4);
  EXPECT_EQ(f.kv->counters().prefix_token_mismatch, 0);
  // Persisted by write-behind, and found after a restart over the same file: by tenant-a only.
  f.kv->FinishStep(/*idle=*/true);
  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  EXPECT_EQ(f.kv->counters().disk.blocks_persisted, 2);
  f.Reopen();
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 2);
  BlockKeyChain b = f.kv->KeyChain("tenant-b");
  EXPECT_EQ(f.kv->MatchPrefix(5, tokens, 0, &b), 0);
  f.kv->Release(5);
  BlockKeyChain a = f.kv->KeyChain("tenant-a");
  EXPECT_EQ(f.kv->MatchPrefix(6, tokens, 0, &a), 8);
  EXPECT_EQ(f.kv->counters().prefix_hits[2], 2);
  EXPECT_TRUE(f.Check(6, 1));
  ASSERT_TRUE(f.kv->VerifyIntegrity().ok());
}

// At the engine: the same prompt in two namespaces, and again in the first. The second
// namespace shares nothing; every run's tokens equal an uncached run's.
TEST(PrefixTrustTest, ANamespaceChangesSharingNeverOutputs) {
  const std::vector<int32_t> prompt = testing::Prompt(41, 30);
  const auto expected = testing::Reference({prompt}, 8);
  auto engine = testing::MakeEngine(testing::TierOptions(/*gpu=*/64));
  ASSERT_NE(engine, nullptr);
  auto run = [&](const std::string& ns) {
    SamplingParams params = testing::Greedy(8);
    params.cache_namespace = ns;
    auto id = engine->Add(prompt, params);
    EXPECT_TRUE(id.ok()) << id.status();
    std::vector<int32_t> out;
    std::vector<StepEvent> events;
    while (engine->NumUnfinished() > 0) {
      events.clear();
      EXPECT_TRUE(engine->Step(&events).ok());
      for (const StepEvent& e : events) {
        if (e.token) out.push_back(*e.token);
      }
      EXPECT_TRUE(engine->VerifyIntegrity().ok());
    }
    return out;
  };
  auto hits = [&] { return engine->Stats()["prefix_hits"]["gpu"].get<int64_t>(); };
  EXPECT_EQ(run("tenant-a"), expected[0]);
  EXPECT_EQ(hits(), 0);
  EXPECT_EQ(run("tenant-b"), expected[0]);
  EXPECT_EQ(hits(), 0);  // tenant-a's blocks are not tenant-b's
  EXPECT_EQ(run("tenant-a"), expected[0]);
  EXPECT_EQ(hits(), 7);  // 30 tokens: 7 full blocks of 4 reused (one token left to compute)
  EXPECT_EQ(run(""), expected[0]);
  EXPECT_EQ(hits(), 7);
  // An invalid namespace is refused when added, naming the problem.
  SamplingParams bad = testing::Greedy(1);
  bad.cache_namespace = std::string("a\xff", 2);
  absl::Status s = engine->Add(prompt, bad).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("UTF-8"), std::string::npos) << s;
  bad.cache_namespace = std::string(kMaxCacheNamespaceBytes + 1, 'x');
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Add(prompt, bad).status()));
}

}  // namespace
}  // namespace kvtier
