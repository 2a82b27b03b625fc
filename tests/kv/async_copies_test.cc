// Asynchronous device -> host tier copies (swap-out, write-back, demotion) through a backend
// that defers every such copy until the KV manager is told it is done (deferred_copy_
// backend.h): a manager that used a host slot, wrote a disk slot, or reused a device block
// before its copy landed would produce different tokens than an unlimited-memory run.
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kv/deferred_copy_backend.h"
#include "kv/kv_cache_manager.h"
#include "kv/tier_test_util.h"
#include "testing/fake_file_io.h"
#include "testing/fake_backend.h"
#include "testing/test_model.h"

namespace kvtier {
namespace {

using testing::DeferredCopyBackend;
using testing::Prompt;
using testing::Reference;
using testing::RunAll;
using testing::SomePrompts;

EngineOptions CopyOptions(int64_t gpu_blocks, int64_t host_blocks = 0, int64_t disk_blocks = 0,
                      const std::string& disk_path = "") {
  return testing::TierOptions(gpu_blocks, host_blocks, disk_blocks, disk_path);
}

// Engine over a DeferredCopyBackend; *deferred is set to it (owned by the engine).
std::unique_ptr<Engine> MakeDeferred(EngineOptions o, DeferredCopyBackend** deferred, int polls_before_done = 2) {
  o.wrap_backend = [deferred, polls_before_done](std::unique_ptr<Backend> inner) -> std::unique_ptr<Backend> {
    auto wrapped = std::make_unique<DeferredCopyBackend>(std::move(inner), polls_before_done);
    *deferred = wrapped.get();
    return wrapped;
  };
  return testing::MakeEngine(o);
}

TEST(AsyncCopiesTest, DeferredSwapToHostIsExact) {
  for (int polls : {1, 2, 1000}) {  // done at the first poll, the second, only when waited for
    auto prompts = SomePrompts(6, 10);
    auto expected = Reference(prompts, 16);
    EngineOptions o = CopyOptions(/*gpu=*/14, /*host=*/64);
    o.preemption = PreemptionMode::kSwap;
    o.max_tokens_per_step = 6;
    DeferredCopyBackend* deferred = nullptr;
    auto engine = MakeDeferred(o, &deferred, polls);
    EXPECT_EQ(RunAll(*engine, prompts, 16), expected) << "polls " << polls;
    nlohmann::json s = engine->Stats();
    EXPECT_GT(s["swaps_out"].get<int64_t>(), 0) << s.dump();
    EXPECT_EQ(s["swaps_in"], s["swaps_out"]);
    EXPECT_GT(s["async_copy_batches"].get<int64_t>(), 0) << s.dump();
    EXPECT_GT(deferred->counts().started_blocks, 0);
    if (polls > 1) {
      EXPECT_GT(deferred->counts().polls_not_done, 0);
    }
  }
}

TEST(AsyncCopiesTest, DeferredSwapToDiskIsExact) {
  auto prompts = SomePrompts(6, 20);
  auto expected = Reference(prompts, 16);
  const std::string path = testing::TestTempDir() + "/async-swap-disk.kv";
  EngineOptions o = CopyOptions(/*gpu=*/14, /*host=*/3, /*disk=*/64, path);
  o.preemption = PreemptionMode::kSwap;
  DeferredCopyBackend* deferred = nullptr;
  auto engine = MakeDeferred(o, &deferred);
  EXPECT_EQ(RunAll(*engine, prompts, 16), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["swaps_out"].get<int64_t>(), 0);
  EXPECT_GT(s["tiers"]["disk"]["peak_bytes"].get<int64_t>(), 0) << s.dump();
  EXPECT_GT(deferred->counts().started_batches, 0);
}

// Without a host tier, evicted prefix blocks go device -> staging -> disk. The copies land
// only when waited for (polls 1000): were the eviction not to wait for them before handing
// the blocks out, they would copy what the next forward wrote, and the later prompt, which
// reads the prefix back from disk, would differ from the reference.
TEST(AsyncCopiesTest, DeferredDemoteToDiskIsExact) {
  const std::vector<int32_t> shared = Prompt(98, 16);  // four full blocks
  std::vector<std::vector<int32_t>> first = {Prompt(4, 3, shared)};
  std::vector<std::vector<int32_t>> later = {Prompt(5, 5, shared)};
  auto expected = Reference(later, 8);
  FakeFileIo io;
  EngineOptions o = CopyOptions(/*gpu=*/12, /*host=*/0, /*disk=*/64, "/fake/demote.kv");
  o.file_io = &io;
  o.disk_write_behind = false;  // else the blocks are on disk before their eviction
  DeferredCopyBackend* deferred = nullptr;
  auto engine = MakeDeferred(o, &deferred, /*polls_before_done=*/1000);
  RunAll(*engine, first, 4);
  for (int i = 0; i < 2; ++i) RunAll(*engine, {Prompt(51 + i, 30)}, 4);  // evicts the shared blocks
  EXPECT_EQ(RunAll(*engine, later, 8), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["disk_demote_writes"].get<int64_t>(), 0) << s.dump();
  EXPECT_EQ(s["prefix_hits"]["disk"].get<int64_t>(), 4) << s.dump();
  EXPECT_GT(deferred->counts().waits, 0);
}

TEST(AsyncCopiesTest, WrittenBackPrefixIsReusedFromHostAndEvictionCopiesNothing) {
  const std::vector<int32_t> shared = Prompt(99, 16);  // four full blocks
  std::vector<std::vector<int32_t>> first = {Prompt(1, 3, shared)};
  std::vector<std::vector<int32_t>> later = {Prompt(2, 5, shared), Prompt(3, 2, shared)};
  auto expected = Reference(later, 8);
  DeferredCopyBackend* deferred = nullptr;
  auto engine = MakeDeferred(CopyOptions(12, 64), &deferred);
  RunAll(*engine, first, 4);
  RunAll(*engine, {Prompt(50, 30)}, 4);  // evicts the shared blocks from the device tier
  EXPECT_EQ(RunAll(*engine, later, 8), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["prefix_hits"]["host"].get<int64_t>(), 0) << s.dump();
  EXPECT_GT(s["blocks_written_back"].get<int64_t>(), 0) << s.dump();
  EXPECT_GT(s["tiers"]["gpu"]["demoted_blocks"].get<int64_t>(), 0) << s.dump();
  // Written back while the forwards ran, so (almost) no eviction had to copy.
  EXPECT_LT(s["evictions_copied"].get<int64_t>(), s["tiers"]["gpu"]["demoted_blocks"].get<int64_t>()) << s.dump();
}

TEST(AsyncCopiesTest, DeferredDiskFaultsNeverCorruptOutput) {
  testing::ExpectDiskFaultsNeverCorruptOutput([](EngineOptions o) {
    DeferredCopyBackend* deferred = nullptr;
    return MakeDeferred(o, &deferred);
  });
}

TEST(AsyncCopiesTest, DeferredRandomAddCancelStepKeepsInvariants) {
  const std::string path = testing::TestTempDir() + "/async-random.kv";
  for (uint32_t seed : {1u, 2u, 3u}) {
    FakeFileIo io;
    EngineOptions o = CopyOptions(/*gpu=*/12, /*host=*/seed == 3 ? 16 : 6, /*disk=*/40, path + std::to_string(seed));
    o.file_io = &io;
    o.max_tokens_per_step = 9;
    o.preemption = seed == 2 ? PreemptionMode::kSwap : PreemptionMode::kAuto;
    DeferredCopyBackend* deferred = nullptr;
    auto engine = MakeDeferred(o, &deferred, 1 + static_cast<int>(seed % 3));
    ASSERT_NO_FATAL_FAILURE(testing::RunRandomOps(*engine, seed, 700));
    EXPECT_GT(deferred->counts().started_batches, 0);
  }
}

// Manager level: a swap-out's blocks handed to another sequence are only written once the
// copy has landed (the manager waits), and the bytes come back intact.
TEST(AsyncCopiesTest, SwapOutBlocksAreReusedOnlyAfterTheirCopyLands) {
  FakeFileIo io;
  auto fake = std::make_unique<testing::FakeBackend>(4);
  testing::FakeBackend* raw = fake.get();
  DeferredCopyBackend backend(std::move(fake), /*polls_before_done=*/1000);
  ASSERT_TRUE(backend.AllocateKvPool(6).ok());
  KvCacheOptions options;
  options.block_tokens = 4;
  options.device_blocks = 6;
  options.host_blocks = 2;
  options.disk_blocks = 8;
  options.disk_path = "/fake/kv";
  options.file_io = &io;
  auto created = KvCacheManager::Create(options, &backend);
  ASSERT_TRUE(created.ok()) << created.status();
  KvCacheManager& kv = **created;
  const size_t bytes = backend.kv_layout().BlockBytes();
  auto stamp = [&](SequenceId seq) {
    auto table = kv.BlockTable(seq);
    for (size_t i = 0; i < table.size(); ++i) std::memset(raw->Block(table[i]), static_cast<int>(seq * 31 + i), bytes);
  };
  auto check = [&](SequenceId seq) {
    auto table = kv.BlockTable(seq);
    for (size_t i = 0; i < table.size(); ++i) {
      for (size_t b = 0; b < bytes; ++b) {
        if (raw->Block(table[i])[b] != static_cast<uint8_t>(seq * 31 + i)) return false;
      }
    }
    return !table.empty();
  };
  ASSERT_TRUE(kv.Reserve(7, 20).ok());  // 5 blocks: 2 to host, 3 to disk
  stamp(7);
  ASSERT_TRUE(kv.SwapOut(7).ok());
  EXPECT_GT(kv.transfers().num_copy_batches(), 0);
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();
  const int64_t waits_before = backend.counts().waits;
  ASSERT_TRUE(kv.Reserve(8, 24).ok());  // needs the swapped-out blocks: waits for them
  EXPECT_GT(backend.counts().waits, waits_before);
  stamp(8);
  kv.Release(8);
  ASSERT_TRUE(kv.SwapIn(7).ok());
  EXPECT_TRUE(check(7));
  EXPECT_GT(kv.counters().copy_stall_seconds, 0);
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();
}

// W5 in miniature (many sequences, device tier for ~6 of them, host 4x device, disk 8x):
// cached blocks are written back while forwards run, so evictions rarely copy and the
// host rarely waits for a copy.
TEST(AsyncCopiesTest, W5ShapedRunHidesMostCopies) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 48; ++i) prompts.push_back(Prompt(1000 + i, 64));
  auto expected = Reference(prompts, 16);
  FakeFileIo io;
  EngineOptions o = CopyOptions(/*gpu=*/128, /*host=*/512, /*disk=*/1024, "/fake/w5.kv");
  o.file_io = &io;
  o.max_tokens_per_step = 128;
  o.preemption = PreemptionMode::kAuto;
  DeferredCopyBackend* deferred = nullptr;
  auto engine = MakeDeferred(o, &deferred, /*polls_before_done=*/2);
  EXPECT_EQ(RunAll(*engine, prompts, 16), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["blocks_written_back"].get<int64_t>(), 0) << s.dump();
  EXPECT_GT(s["swaps_out"].get<int64_t>(), 0) << s.dump();
  const int64_t demoted = s["tiers"]["gpu"]["demoted_blocks"].get<int64_t>();
  EXPECT_GT(demoted, 0) << s.dump();
  // Measured 0 and 0 (2026-11-29); a tenth of the evictions / one wait per swap-out at most.
  EXPECT_LE(s["evictions_copied"].get<int64_t>() * 10, demoted) << s.dump();
  EXPECT_LE(deferred->counts().waits, s["swaps_out"].get<int64_t>()) << s.dump();
}

}  // namespace
}  // namespace kvtier
