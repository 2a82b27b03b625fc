// RemoteBlockStore against a real redis-server this test starts on a loopback port
// (testing/redis_server.h; skipped, saying why, only when redis-server is not installed):
// lookups on parallel connections return every block exactly (values received in place),
// misses and wrong-size values as such; puts of blocks Redis holds are not sent again
// (found by a lookup, or by EXISTS / EXPIRE, which renews a TTL); a value found corrupt is
// overwritten by the next put of its block; lookups with a destination land there and hold
// nothing of the store's bound; a probe (EXISTS) says which blocks Redis holds, and its
// found blocks' puts are skipped.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "remote/remote_block_store.h"
#include "testing/redis_server.h"

namespace kvtier {
namespace {

#define SKIP_WITHOUT_REDIS()                                                          \
  do {                                                                                \
    const std::string why = testing::RedisMissingReason();                            \
    if (!why.empty()) GTEST_SKIP() << why;                                            \
  } while (0)

constexpr size_t kBlockBytes = 64 << 10;

RemoteStoreOptions StoreOptions(const testing::RedisServer& redis, int connections = 4) {
  RemoteStoreOptions options;
  options.nodes = {{"127.0.0.1", redis.port()}};
  options.format = {/*model_fingerprint=*/42, kBlockBytes, /*block_tokens=*/4};
  options.max_bytes_in_flight = 64ll << 20;
  options.timeout = std::chrono::milliseconds(5000);  // CI machines are shared
  options.get_connections = connections;
  return options;
}

Sha256Digest KeyOf(int i) {
  Sha256Digest key;
  key.bytes[0] = static_cast<uint8_t>(i);
  key.bytes[1] = 0xA5;
  return key;
}
std::vector<int32_t> TokensOf(int i) { return {i, i + 1, i + 2, i + 3}; }
std::vector<uint8_t> BlockOf(int i) {
  std::vector<uint8_t> block(kBlockBytes);
  for (size_t b = 0; b < block.size(); ++b) block[b] = static_cast<uint8_t>(b * 31 + static_cast<size_t>(i) * 7);
  return block;
}

// Every result of `n` gets, waited for.
std::vector<RemoteBlockStore::GetResult> TakeAll(RemoteBlockStore& store, size_t n) {
  std::vector<RemoteBlockStore::GetResult> all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (all.size() < n && std::chrono::steady_clock::now() < deadline) {
    store.WaitForGets(std::chrono::steady_clock::now() + std::chrono::seconds(1));
    for (RemoteBlockStore::GetResult& r : store.TakeFinished()) all.push_back(std::move(r));
  }
  return all;
}

TEST(RemoteStoreTest, ParallelLookupsReturnEveryBlockExactly) {
  SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RemoteBlockStore store(StoreOptions(redis));
  constexpr int kBlocks = 40;
  for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(store.Put(KeyOf(i), TokensOf(i), BlockOf(i).data()).ok());
  store.Flush();
  ASSERT_EQ(store.counters().puts, kBlocks);
  // A value of the wrong size under block 100's key; block 101 never stored.
  redis.Command({"SET", RemoteKeyOf(KeyOf(100)), "short"});
  for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(store.Get(KeyOf(i), TokensOf(i)).ok());
  ASSERT_TRUE(store.Get(KeyOf(100), TokensOf(100)).ok());
  ASSERT_TRUE(store.Get(KeyOf(101), TokensOf(101)).ok());
  const std::vector<RemoteBlockStore::GetResult> results = TakeAll(store, kBlocks + 2);
  ASSERT_EQ(results.size(), static_cast<size_t>(kBlocks + 2));
  int hits = 0;
  for (const RemoteBlockStore::GetResult& r : results) {
    const int i = r.key.bytes[0];
    if (i == 100) {
      EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
    } else if (i == 101) {
      EXPECT_TRUE(absl::IsNotFound(r.status)) << r.status;
    } else {
      ASSERT_TRUE(r.status.ok()) << i << ": " << r.status;
      const std::vector<uint8_t> expected = BlockOf(i);
      EXPECT_TRUE(std::equal(r.bytes.begin(), r.bytes.end(), expected.begin(), expected.end())) << i;
      ++hits;
    }
  }
  EXPECT_EQ(hits, kBlocks);
  const RemoteBlockStore::Counters c = store.counters();
  EXPECT_EQ(c.hits, kBlocks);
  EXPECT_EQ(c.misses, 1);
  EXPECT_EQ(c.corrupt, 1);
  EXPECT_EQ(c.get_bytes, kBlocks * static_cast<int64_t>(kBlockBytes));
  EXPECT_GT(c.get_seconds, 0);
  EXPECT_EQ(c.bytes_in_flight, 0);
}

TEST(RemoteStoreTest, PutsOfBlocksRedisHoldsAreSkipped) {
  SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  {
    RemoteBlockStore a(StoreOptions(redis));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(a.Put(KeyOf(i), TokensOf(i), BlockOf(i).data()).ok());
    a.Flush();
    EXPECT_EQ(a.counters().puts, 5);
    EXPECT_EQ(a.counters().puts_skipped, 0);
    // Stored here: known, a second put is not even queued.
    EXPECT_TRUE(a.KnownPresent(KeyOf(0)));
    ASSERT_TRUE(a.Put(KeyOf(0), TokensOf(0), BlockOf(0).data()).ok());
    EXPECT_EQ(a.counters().puts_skipped, 1);
  }
  // Another process's store: Redis says it holds them (EXISTS), no value is sent.
  RemoteBlockStore b(StoreOptions(redis, /*connections=*/1));
  EXPECT_FALSE(b.KnownPresent(KeyOf(1)));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b.Put(KeyOf(i), TokensOf(i), BlockOf(i).data()).ok());
  b.Flush();
  EXPECT_EQ(b.counters().puts, 0);
  EXPECT_EQ(b.counters().puts_skipped, 5);
  EXPECT_EQ(b.counters().bytes_in_flight, 0);
  // Found by a lookup: known.
  RemoteBlockStore c(StoreOptions(redis));
  ASSERT_TRUE(c.Get(KeyOf(3), TokensOf(3)).ok());
  ASSERT_EQ(TakeAll(c, 1).size(), 1u);
  EXPECT_TRUE(c.KnownPresent(KeyOf(3)));
  // With a TTL, EXPIRE renews the block's expiry instead of storing it again.
  RemoteStoreOptions with_ttl = StoreOptions(redis);
  with_ttl.ttl_seconds = 1000;
  RemoteBlockStore d(with_ttl);
  EXPECT_EQ(redis.Command({"TTL", RemoteKeyOf(KeyOf(2))}).integer, -1);  // none yet
  ASSERT_TRUE(d.Put(KeyOf(2), TokensOf(2), BlockOf(2).data()).ok());
  d.Flush();
  EXPECT_EQ(d.counters().puts_skipped, 1);
  EXPECT_GT(redis.Command({"TTL", RemoteKeyOf(KeyOf(2))}).integer, 0);
}

TEST(RemoteStoreTest, ACorruptValueIsOverwrittenByTheNextPut) {
  SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RemoteBlockStore store(StoreOptions(redis));
  ASSERT_TRUE(store.Put(KeyOf(7), TokensOf(7), BlockOf(7).data()).ok());
  store.Flush();
  const std::string key = RemoteKeyOf(KeyOf(7));
  const std::string good = redis.Command({"GET", key}).str;
  ASSERT_EQ(good.size(), RemoteValueBytes(StoreOptions(redis).format));
  redis.Command({"SETRANGE", key, std::to_string(good.size() - 1), std::string(1, static_cast<char>(good.back() ^ 1))});
  ASSERT_TRUE(store.Get(KeyOf(7), TokensOf(7)).ok());
  std::vector<RemoteBlockStore::GetResult> results = TakeAll(store, 1);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(absl::IsDataLoss(results[0].status)) << results[0].status;
  EXPECT_FALSE(store.KnownPresent(KeyOf(7)));
  // The block recomputed and put again: stored over the corrupt value, not skipped.
  ASSERT_TRUE(store.Put(KeyOf(7), TokensOf(7), BlockOf(7).data()).ok());
  store.Flush();
  EXPECT_EQ(redis.Command({"GET", key}).str, good);
  ASSERT_TRUE(store.Get(KeyOf(7), TokensOf(7)).ok());
  results = TakeAll(store, 1);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].status.ok()) << results[0].status;
}

TEST(RemoteStoreTest, LookupsWithADestinationLandThereOutsideTheBound) {
  SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  constexpr int kBlocks = 12;
  {
    RemoteBlockStore writer(StoreOptions(redis));
    for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(writer.Put(KeyOf(i), TokensOf(i), BlockOf(i).data()).ok());
    writer.Flush();
  }
  RemoteStoreOptions options = StoreOptions(redis);
  options.max_bytes_in_flight = 2 * kBlockBytes;  // two buffered lookups at most
  RemoteBlockStore store(options);
  redis.Command({"SET", RemoteKeyOf(KeyOf(100)), "short"});
  std::vector<uint8_t> landing((kBlocks + 2) * kBlockBytes, 0);
  auto at = [&](int n) { return landing.data() + static_cast<size_t>(n) * kBlockBytes; };
  // Far past the bound: the bytes are the caller's.
  for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(store.Get(KeyOf(i), TokensOf(i), at(i)).ok());
  ASSERT_TRUE(store.Get(KeyOf(100), TokensOf(100), at(kBlocks)).ok());
  ASSERT_TRUE(store.Get(KeyOf(101), TokensOf(101), at(kBlocks + 1)).ok());
  EXPECT_EQ(store.counters().bytes_in_flight, 0);
  const std::vector<RemoteBlockStore::GetResult> results = TakeAll(store, kBlocks + 2);
  ASSERT_EQ(results.size(), static_cast<size_t>(kBlocks + 2));
  for (const RemoteBlockStore::GetResult& r : results) {
    const int i = r.key.bytes[0];
    EXPECT_TRUE(r.bytes.empty());
    if (i == 100) {
      EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
      EXPECT_EQ(r.destination, at(kBlocks));
    } else if (i == 101) {
      EXPECT_TRUE(absl::IsNotFound(r.status)) << r.status;
      EXPECT_EQ(r.destination, at(kBlocks + 1));
    } else {
      ASSERT_TRUE(r.status.ok()) << r.status;
      ASSERT_EQ(r.destination, at(i));
      EXPECT_EQ(std::memcmp(r.destination, BlockOf(i).data(), kBlockBytes), 0) << "block " << i;
    }
  }
  EXPECT_EQ(store.counters().hits, kBlocks);
  EXPECT_EQ(store.counters().bytes_in_flight, 0);
}

TEST(RemoteStoreTest, AProbeSaysWhichBlocksRedisHoldsAndTheirPutsAreSkipped) {
  SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RemoteBlockStore writer(StoreOptions(redis));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(writer.Put(KeyOf(i), TokensOf(i), BlockOf(i).data()).ok());
  writer.Flush();
  RemoteBlockStore store(StoreOptions(redis));
  const std::vector<Sha256Digest> keys = {KeyOf(0), KeyOf(1), KeyOf(7), KeyOf(4), KeyOf(8)};
  const absl::StatusOr<std::vector<bool>> present =
      store.Probe(keys, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(present.ok()) << present.status();
  EXPECT_EQ(*present, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_TRUE(store.KnownPresent(KeyOf(1)));
  EXPECT_FALSE(store.KnownPresent(KeyOf(7)));
  ASSERT_TRUE(store.Put(KeyOf(1), TokensOf(1), BlockOf(1).data()).ok());  // known: not sent
  ASSERT_TRUE(store.Put(KeyOf(7), TokensOf(7), BlockOf(7).data()).ok());
  store.Flush();
  EXPECT_EQ(store.counters().puts, 1);
  EXPECT_EQ(store.counters().puts_skipped, 1);
  EXPECT_EQ(store.counters().gets, 0);  // a probe is no lookup
}

TEST(RemoteStoreTest, AProbeOfAnUnreachableTierFailsWithinItsDeadline) {
  SKIP_WITHOUT_REDIS();
  RemoteStoreOptions options;
  options.nodes = {{"127.0.0.1", testing::FreePort()}};
  options.format = {42, kBlockBytes, 4};
  options.timeout = std::chrono::milliseconds(200);
  RemoteBlockStore store(options);
  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<std::vector<bool>> present =
      store.Probe(std::vector<Sha256Digest>{KeyOf(0)}, start + std::chrono::seconds(5));
  EXPECT_FALSE(present.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Switched off now: refused at once.
  EXPECT_TRUE(absl::IsUnavailable(store.Probe(std::vector<Sha256Digest>{KeyOf(0)}, start + std::chrono::seconds(5)).status()));
}

TEST(RemoteStoreTest, StagedPutsAreEncodedOnTheLaneAndReleaseTheirBlocks) {
  SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RemoteBlockStore store(StoreOptions(redis));
  constexpr int kBlocks = 6;
  std::vector<std::vector<uint8_t>> staging;
  for (int i = 0; i < kBlocks; ++i) staging.push_back(BlockOf(i));
  for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(store.PutStaged(KeyOf(i), TokensOf(i), staging[i].data()).ok());
  store.Flush();  // the staging is held until the lane has encoded it
  EXPECT_EQ(store.staged_puts(), 0);
  EXPECT_EQ(store.puts_pending(), 0);
  // The staging may be reused now: what Redis holds is what was staged.
  for (std::vector<uint8_t>& block : staging) std::fill(block.begin(), block.end(), 0xEE);
  for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(store.Get(KeyOf(i), TokensOf(i)).ok());
  const std::vector<RemoteBlockStore::GetResult> results = TakeAll(store, kBlocks);
  ASSERT_EQ(results.size(), static_cast<size_t>(kBlocks));
  for (const RemoteBlockStore::GetResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    const int i = r.key.bytes[0];
    EXPECT_TRUE(std::equal(r.bytes.begin(), r.bytes.end(), BlockOf(i).begin())) << "block " << i;
  }
}

// With room for one value in flight, each put waits for the last to be sent, not only
// encoded: WaitForPutRoom says when the next is accepted, and every one gets there.
TEST(RemoteStoreTest, WaitForPutRoomWaitsUntilTheNextPutIsAccepted) {
  SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RemoteStoreOptions options = StoreOptions(redis);
  options.max_bytes_in_flight = 1;
  RemoteBlockStore store(options);
  constexpr int kBlocks = 8;
  std::vector<std::vector<uint8_t>> staging;
  for (int i = 0; i < kBlocks; ++i) staging.push_back(BlockOf(i));
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(store.WaitForPutRoom(std::chrono::steady_clock::now() + std::chrono::seconds(30))) << "block " << i;
    ASSERT_TRUE(store.PutStaged(KeyOf(i), TokensOf(i), staging[i].data()).ok()) << "block " << i;
  }
  store.Flush();
  EXPECT_EQ(store.counters().puts, kBlocks);
  EXPECT_EQ(store.counters().puts_refused, 0);
  // Without waiting, the second put of two is refused while the first is on its way.
  ASSERT_TRUE(store.Put(KeyOf(kBlocks), TokensOf(kBlocks), BlockOf(kBlocks).data()).ok());
  const absl::Status second = store.Put(KeyOf(kBlocks + 1), TokensOf(kBlocks + 1), BlockOf(kBlocks + 1).data());
  store.Flush();
  if (!second.ok()) {
    EXPECT_TRUE(absl::IsResourceExhausted(second)) << second;
  }
  EXPECT_TRUE(store.WaitForPutRoom(std::chrono::steady_clock::now()));  // all sent: room at once
}

TEST(RemoteStoreTest, StagedPutsDroppedUnsentReleaseTheirBlocks) {
  SKIP_WITHOUT_REDIS();
  RemoteStoreOptions options;
  options.nodes = {{"127.0.0.1", testing::FreePort()}};  // nobody listens: the tier goes off
  options.format = {42, kBlockBytes, 4};
  options.timeout = std::chrono::milliseconds(200);
  RemoteBlockStore store(options);
  const std::vector<uint8_t> block = BlockOf(1);
  ASSERT_TRUE(store.PutStaged(KeyOf(1), TokensOf(1), block.data()).ok());
  store.Flush();
  EXPECT_EQ(store.staged_puts(), 0);
  EXPECT_EQ(store.counters().puts, 0);
}

}  // namespace
}  // namespace kvtier
