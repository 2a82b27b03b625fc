// remote_get_bench: what RemoteBlockStore's lookups deliver from a local Redis. Starts a
// redis-server of its own on a loopback port (testing/redis_server.h), stores N blocks
// (default 256 of 2 MiB: W6c's 4,096-token prefix), then gets them all, a few times, and
// prints the wall-clock GB/s of each round and the store's own measure
// (get_bytes / get_seconds). Not a test (nothing to pass; numbers depend on the machine):
//   cmake --build BUILD --target remote_get_bench
//   BUILD/tests/kv/remote_get_bench [--blocks 256] [--block-mib 2] [--connections 4] [--rounds 5]
//                                   [--io-threads N (redis-server's; default 1)]
//                                   [--in-place 1 (values received into one preallocated,
//                                    pre-touched buffer, as the KV manager's host slots;
//                                    2: a ring of 64 block buffers, reused, cache-warm)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "remote/remote_block_store.h"
#include "testing/redis_server.h"

namespace kvtier {
namespace {

int Main(int argc, char** argv) {
  int blocks = 256, block_mib = 2, connections = 4, rounds = 5, io_threads = 1, in_place = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--blocks") blocks = value;
    else if (flag == "--block-mib") block_mib = value;
    else if (flag == "--connections") connections = value;
    else if (flag == "--rounds") rounds = value;
    else if (flag == "--io-threads") io_threads = value;
    else if (flag == "--in-place") in_place = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (const std::string why = testing::RedisMissingReason(); !why.empty()) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  testing::RedisServer redis(/*cluster=*/false, {"--io-threads", std::to_string(io_threads)});
  if (!redis.running()) {
    std::fprintf(stderr, "redis-server did not start\n");
    return 1;
  }
  RemoteStoreOptions options;
  options.nodes = {{"127.0.0.1", redis.port()}};
  options.format = {/*model_fingerprint=*/42, static_cast<size_t>(block_mib) << 20, /*block_tokens=*/16};
  options.max_bytes_in_flight = 4ll << 30;
  options.timeout = std::chrono::milliseconds(5000);
  options.get_connections = connections;
  RemoteBlockStore store(options);

  std::mt19937_64 rng(7);
  std::vector<uint8_t> block(options.format.block_bytes);
  std::vector<Sha256Digest> keys(static_cast<size_t>(blocks));
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(blocks), std::vector<int32_t>(16));
  for (int b = 0; b < blocks; ++b) {
    for (auto& byte : keys[b].bytes) byte = static_cast<uint8_t>(rng());
    for (auto& t : tokens[b]) t = static_cast<int32_t>(rng() % 32000);
    for (size_t i = 0; i < block.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(block.data() + i, &v, 8);
    }
    while (!store.Put(keys[b], tokens[b], block.data()).ok()) store.Flush();
  }
  store.Flush();
  std::printf("stored %d blocks of %d MiB (%lld puts); lookups on %d connections; redis io-threads %d; %s\n", blocks,
              block_mib, static_cast<long long>(store.counters().puts), connections, io_threads,
              in_place != 0 ? "in place" : "into buffers of their own");
  // In place: every block's destination touched once before the rounds (no page faults).
  const int ring = in_place == 2 ? std::min(blocks, 64) : blocks;
  std::vector<uint8_t> landing(in_place != 0 ? static_cast<size_t>(ring) * options.format.block_bytes : 0, 1);
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < blocks; ++b) {
      uint8_t* destination = in_place != 0 ? landing.data() + static_cast<size_t>(b % ring) * options.format.block_bytes : nullptr;
      if (!store.Get(keys[b], tokens[b], destination).ok()) {
        std::fprintf(stderr, "get refused\n");
        return 1;
      }
    }
    int landed = 0, hits = 0;
    while (landed < blocks) {
      store.WaitForGets(std::chrono::steady_clock::now() + std::chrono::seconds(10));
      for (const RemoteBlockStore::GetResult& r : store.TakeFinished()) {
        ++landed;
        hits += r.status.ok() ? 1 : 0;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double bytes = static_cast<double>(blocks) * static_cast<double>(options.format.block_bytes);
    std::printf("round %d: %d/%d hits in %.3f s: %.2f GB/s\n", round, hits, blocks, seconds, bytes / seconds / 1e9);
  }
  const RemoteBlockStore::Counters c = store.counters();
  std::printf("store's measure: %.2f GB/s (get_bytes %lld over get_seconds %.3f)\n",
              c.get_seconds > 0 ? static_cast<double>(c.get_bytes) / c.get_seconds / 1e9 : 0.0,
              static_cast<long long>(c.get_bytes), c.get_seconds);
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
