// Prefix entries of layer groups in the remote tier, against a real redis-server this test
// starts on a loopback port (testing/redis_server.h; skipped, saying why, only when it is
// not installed): each group's computed entries are put under their group's key, and a
// fresh manager (a restart) loads every group's blocks its next query reads back, to the
// bytes they had; a group's block missing from Redis, corrupt, or holding another group's
// block shortens the prefix (the rest is computed); a queued put whose block was evicted
// and written for another prefix and group before the put is dropped, never stored (and,
// without groups, the same).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv/grouped_fixture.h"
#include "kv/kv_cache_manager.h"
#include "remote/remote_value.h"
#include "testing/redis_server.h"

namespace kvtier {
namespace {

constexpr int kRemotePattern = 3;
constexpr int kOtherPattern = 99;

// A pool of 15 blocks, the prefix cache on, no host or disk tier: what a match finds below
// the device comes from Redis.
struct GroupedRemote : testing::GroupedFixture {
  explicit GroupedRemote(const testing::RedisServer& redis)
      : GroupedFixture(/*device_blocks=*/15, /*host_blocks=*/0, /*disk_blocks=*/0, /*prefix_cache=*/true,
                       redis.url()) {}
  int64_t hits(Tier tier) const { return kv->counters().prefix_hits[static_cast<int>(tier)]; }
  // A restart: a fresh manager over a device pool whose bytes are garbage, so that every
  // block a match uses must have been loaded.
  void Restart() {
    ASSERT_NO_FATAL_FAILURE(Reopen());
    for (int32_t b = 0; b < backend.num_kv_blocks(); ++b) std::memset(backend.Block(b), 0xee, kv->block_bytes());
  }
  // The Redis key of group g's part of logical block b of `tokens`.
  std::string GroupKey(const std::vector<int32_t>& tokens, int64_t b, int64_t g) const {
    BlockKeyChain chain = kv->KeyChain("");
    return RemoteKeyOf(GroupBlockKey(chain.Key(tokens, testing::kGroupedBlockTokens, b), g).digest);
  }
};

std::vector<int32_t> RemotePrefixTokens(int n, int32_t first = 500) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(first + i);
  return out;
}

std::vector<std::string> StoredKeys(const testing::RedisServer& redis) {
  std::vector<std::string> keys;
  for (const RedisReply& key : redis.Command({"KEYS", "kvtier:block:*"}).elements) keys.push_back(key.str);
  return keys;
}

// A redis-server of its own and the manager over it.
class GroupedRemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::RedisMissingReason();
    if (!why.empty()) GTEST_SKIP() << why;
    redis_ = std::make_unique<testing::RedisServer>();
    ASSERT_TRUE(redis_->running());
    f_ = std::make_unique<GroupedRemote>(*redis_);
    ASSERT_NE(f_->kv, nullptr);
  }
  // Sequence 1 computes [0, 24): 6 blocks a group, 12 entries, all queued for Redis and put
  // at the step's end; released. Then a restart, whose match finds them in Redis only.
  void ComputePutAndRestart() {
    GroupedRemote& f = *f_;
    ASSERT_TRUE(f.kv->Reserve(1, 24).ok());
    f.Stamp(1, kRemotePattern);
    f.kv->OnComputed(1, RemotePrefixTokens(24), 24);
    f.kv->Release(1);
    f.kv->FinishStep(/*idle=*/true);
    EXPECT_EQ(f.kv->counters().remote.puts_queued, 12);
    EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
    ASSERT_NO_FATAL_FAILURE(f.Restart());  // the old manager's puts are sent before it goes
  }

  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<GroupedRemote> f_;  // destroyed first: its last puts reach Redis
};

TEST_F(GroupedRemoteTest, EveryGroupsBlocksComeBackFromRedisAfterARestart) {
  testing::RedisServer& redis = *redis_;
  GroupedRemote& f = *f_;
  ASSERT_NO_FATAL_FAILURE(ComputePutAndRestart());
  // Each group's blocks under keys of their own: two groups' blocks of the same tokens
  // never share one.
  const std::vector<int32_t> tokens = RemotePrefixTokens(24);
  EXPECT_EQ(StoredKeys(redis).size(), 12u);
  for (int64_t b = 0; b < 6; ++b) {
    EXPECT_NE(f.GroupKey(tokens, b, 0), f.GroupKey(tokens, b, 1));
    EXPECT_EQ(redis.Command({"EXISTS", f.GroupKey(tokens, b, 0), f.GroupKey(tokens, b, 1)}).integer, 2) << b;
  }
  // Looked up ahead while the prompt waits, then matched: the next query at 20 reads full
  // blocks 0..4 and window block 4, every one loaded from Redis.
  EXPECT_TRUE(f.kv->ReadAhead(2, RemotePrefixTokens(21)));
  EXPECT_EQ(f.kv->MatchPrefix(2, RemotePrefixTokens(21)), 20);
  EXPECT_EQ(f.tables().Table(2, 1).first_block, 4);
  EXPECT_TRUE(f.Holds(2, kRemotePattern, 0, 0, 5));
  EXPECT_TRUE(f.Holds(2, kRemotePattern, 1, 4, 5));
  EXPECT_EQ(f.hits(Tier::kRemote), 5);
  EXPECT_EQ(f.kv->Stats().remote.hits, 6) << "five blocks of the full group, one of the window's";
  EXPECT_EQ(f.kv->Stats().counters.corrupt_blocks_detected, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  // The loaded blocks are device entries now: another prompt shares them, Redis unasked.
  EXPECT_EQ(f.kv->MatchPrefix(3, RemotePrefixTokens(21)), 20);
  EXPECT_EQ(f.tables().Table(3, 0).blocks, f.tables().Table(2, 0).blocks);
  EXPECT_EQ(f.hits(Tier::kDevice), 5);
  f.kv->Release(2);
  f.kv->Release(3);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST_F(GroupedRemoteTest, AGroupsMissingBlockShortensThePrefix) {
  testing::RedisServer& redis = *redis_;
  GroupedRemote& f = *f_;
  ASSERT_NO_FATAL_FAILURE(ComputePutAndRestart());
  // The window's block 4 is gone (expired, evicted by Redis): the query at 20 cannot run
  // from Redis; the one at 16 reads full blocks 0..3 and window block 3, all there.
  ASSERT_EQ(redis.Command({"DEL", f.GroupKey(RemotePrefixTokens(24), 4, 1)}).integer, 1);
  EXPECT_EQ(f.kv->MatchPrefix(2, RemotePrefixTokens(21)), 16);
  EXPECT_TRUE(f.Holds(2, kRemotePattern, 0, 0, 4));
  EXPECT_TRUE(f.Holds(2, kRemotePattern, 1, 3, 4));
  EXPECT_EQ(f.hits(Tier::kRemote), 4);
  EXPECT_GE(f.kv->Stats().remote.misses, 1);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  // The rest is computed, and becomes entries (and puts) again.
  ASSERT_TRUE(f.kv->Reserve(2, 24).ok());
  f.Stamp(2, kRemotePattern);
  f.kv->OnComputed(2, RemotePrefixTokens(24), 24);
  f.kv->Release(2);
  EXPECT_EQ(f.kv->MatchPrefix(3, RemotePrefixTokens(21)), 20);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST_F(GroupedRemoteTest, CorruptAndOtherGroupsValuesAreDetectedNotUsed) {
  testing::RedisServer& redis = *redis_;
  GroupedRemote& f = *f_;
  ASSERT_NO_FATAL_FAILURE(ComputePutAndRestart());
  const std::vector<int32_t> tokens = RemotePrefixTokens(24);
  // The window's block 4: one payload bit flipped. Its block 3: the full group's block 3,
  // a valid value of the same tokens, under the window's key.
  const std::string key4 = f.GroupKey(tokens, 4, 1);
  const std::string value4 = redis.Command({"GET", key4}).str;
  ASSERT_FALSE(value4.empty());
  const std::string flipped(1, static_cast<char>(value4.back() ^ 0x10));
  redis.Command({"SETRANGE", key4, std::to_string(value4.size() - 1), flipped});
  redis.Command({"SET", f.GroupKey(tokens, 3, 1), redis.Command({"GET", f.GroupKey(tokens, 3, 0)}).str});
  // Neither is used: the query at 12 (window block 2) is the longest whose blocks are sound.
  EXPECT_EQ(f.kv->MatchPrefix(2, RemotePrefixTokens(21)), 12);
  EXPECT_TRUE(f.Holds(2, kRemotePattern, 0, 0, 3));
  EXPECT_TRUE(f.Holds(2, kRemotePattern, 1, 2, 3));
  const KvStats stats = f.kv->Stats();
  EXPECT_EQ(stats.remote.corrupt, 2);
  EXPECT_EQ(stats.counters.corrupt_blocks_detected, 2);
  EXPECT_EQ(f.hits(Tier::kRemote), 3);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// The staleness fence: sequence 1's 12 entries are queued, then, before the step's end
// puts them, the window group's entries 0..4 are evicted for sequence 9, whose blocks
// (other tokens, both groups) are written into them and become entries themselves. Those 5
// queued puts are dropped: Redis never holds sequence 9's bytes under sequence 1's keys.
TEST_F(GroupedRemoteTest, APutWhoseBlockWasReusedIsDropped) {
  testing::RedisServer& redis = *redis_;
  GroupedRemote& f = *f_;
  ASSERT_TRUE(f.kv->Reserve(1, 24).ok());
  f.Stamp(1, kRemotePattern);
  f.kv->OnComputed(1, RemotePrefixTokens(24), 24);
  f.kv->Release(1);
  // 8 blocks: the 3 free ones and the window's entries 0..4, the least recently released.
  const std::vector<int32_t> other = RemotePrefixTokens(16, /*first=*/900);
  ASSERT_TRUE(f.kv->Reserve(9, 16).ok());
  f.Stamp(9, kOtherPattern);
  f.kv->OnComputed(9, other, 16);
  f.kv->Release(9);
  f.kv->FinishStep(/*idle=*/true);
  EXPECT_EQ(f.kv->counters().remote.puts_queued, 12 + 8);
  EXPECT_EQ(f.kv->counters().remote.puts_stale, 5);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  ASSERT_NO_FATAL_FAILURE(f.Restart());
  EXPECT_EQ(StoredKeys(redis).size(), 12u - 5u + 8u);
  for (int64_t b = 0; b < 5; ++b) {
    EXPECT_EQ(redis.Command({"EXISTS", f.GroupKey(RemotePrefixTokens(24), b, 1)}).integer, 0) << b;
  }
  // Sequence 1's window blocks 0..4 are nowhere: a query at 20 finds no usable prefix; one
  // at 24 reads window block 5, which was put.
  EXPECT_EQ(f.kv->MatchPrefix(2, RemotePrefixTokens(21)), 0);
  EXPECT_EQ(f.kv->MatchPrefix(3, RemotePrefixTokens(25)), 24);
  EXPECT_TRUE(f.Holds(3, kRemotePattern, 0, 0, 6));
  EXPECT_TRUE(f.Holds(3, kRemotePattern, 1, 5, 6));
  // Sequence 9's blocks, put from the same device blocks after their reuse, are its own.
  EXPECT_EQ(f.kv->MatchPrefix(4, RemotePrefixTokens(13, /*first=*/900)), 12);
  EXPECT_TRUE(f.Holds(4, kOtherPattern, 0, 0, 3));
  EXPECT_TRUE(f.Holds(4, kOtherPattern, 1, 2, 3));
  EXPECT_EQ(f.kv->Stats().counters.corrupt_blocks_detected, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

// The same fence without groups: four computed blocks queued, all evicted and written for
// another prefix before the step's end. Only the other prefix's blocks are put.
TEST_F(GroupedRemoteTest, WithoutGroupsTooAPutWhoseBlockWasReusedIsDropped) {
  testing::FakeBackend backend(testing::kGroupedBlockTokens);
  ASSERT_TRUE(backend.AllocateKvPool(4).ok());
  KvCacheOptions options = f_->kv_options;
  options.device_blocks = 4;
  options.layer_groups.reset();
  auto created = KvCacheManager::Create(options, &backend);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<KvCacheManager> kv = *std::move(created);
  auto compute = [&](SequenceId seq, const std::vector<int32_t>& tokens, int pattern) {
    ASSERT_TRUE(kv->Reserve(seq, 16).ok());
    for (const BlockId b : kv->BlockTable(seq)) std::memset(backend.Block(b), pattern, kv->block_bytes());
    kv->OnComputed(seq, tokens, 16);
    kv->Release(seq);
  };
  const std::vector<int32_t> other = RemotePrefixTokens(16, /*first=*/900);
  ASSERT_NO_FATAL_FAILURE(compute(1, RemotePrefixTokens(16), kRemotePattern));
  ASSERT_NO_FATAL_FAILURE(compute(9, other, kOtherPattern));
  kv->FinishStep(/*idle=*/true);
  EXPECT_EQ(kv->counters().remote.puts_queued, 8);
  EXPECT_EQ(kv->counters().remote.puts_stale, 4);
  kv.reset();  // its puts reach Redis
  EXPECT_EQ(StoredKeys(*redis_).size(), 4u);
  created = KvCacheManager::Create(options, &backend);
  ASSERT_TRUE(created.ok()) << created.status();
  kv = *std::move(created);
  EXPECT_EQ(kv->MatchPrefix(2, RemotePrefixTokens(17)), 0);
  EXPECT_EQ(kv->MatchPrefix(3, RemotePrefixTokens(17, /*first=*/900)), 16);
  for (const BlockId b : kv->BlockTable(3)) {
    EXPECT_EQ(backend.Block(b)[kv->block_bytes() - 1], kOtherPattern);
  }
  EXPECT_TRUE(kv->VerifyIntegrity().ok()) << kv->VerifyIntegrity();
}

}  // namespace
}  // namespace kvtier
