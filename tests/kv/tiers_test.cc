// The three tiers at work through the engine on the CPU backend: swaps to host and to disk
// and recomputes give exactly the tokens of an unlimited run; prefix blocks are reused from
// every tier and found again on disk by a new context; corrupt or failing disk slots are
// detected and never used as data; invariants hold after every step of random workloads.
#include <filesystem>
#include <random>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kv/tier_test_util.h"
#include "testing/fake_file_io.h"
#include "testing/sanitizers.h"

namespace kvtier {
namespace {

using testing::Greedy;
using testing::MakeEngine;
using testing::Prompt;
using testing::RunAll;
using testing::SomePrompts;
using testing::TierOptions;
using testing::TierTestBlockBytes;

int64_t BlockBytes() { return TierTestBlockBytes(); }

EngineOptions Options(int64_t gpu_blocks, int64_t host_blocks = 0, int64_t disk_blocks = 0,
                      const std::string& disk_path = "") {
  return TierOptions(gpu_blocks, host_blocks, disk_blocks, disk_path);
}

TEST(TiersTest, SwapToHostIsExact) {
  auto prompts = SomePrompts(6, 10);
  auto expected = testing::Reference(prompts, 16);
  EngineOptions o = Options(/*gpu=*/14, /*host=*/64);
  o.preemption = PreemptionMode::kSwap;
  o.max_tokens_per_step = 6;  // the step budget, not memory, sometimes holds a resume back
  auto engine = MakeEngine(o);
  EXPECT_EQ(RunAll(*engine, prompts, 16), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["swaps_out"].get<int64_t>(), 0) << s.dump();
  EXPECT_EQ(s["swaps_in"], s["swaps_out"]);
  EXPECT_GT(s["swap_prefetches"].get<int64_t>(), 0) << s.dump();
  EXPECT_GT(s["tiers"]["host"]["peak_bytes"].get<int64_t>(), 0);
  EXPECT_LE(s["tiers"]["gpu"]["peak_bytes"].get<int64_t>(), 14 * BlockBytes());
  EXPECT_EQ(s["gpu_allocs_after_init"], 0);
}

TEST(TiersTest, SwapToDiskWhenHostIsFullIsExact) {
  auto prompts = SomePrompts(6, 20);
  auto expected = testing::Reference(prompts, 16);
  const std::string path = testing::TestTempDir() + "/swap-disk.kv";
  EngineOptions o = Options(/*gpu=*/14, /*host=*/3, /*disk=*/64, path);
  o.preemption = PreemptionMode::kSwap;
  auto engine = MakeEngine(o);
  EXPECT_EQ(RunAll(*engine, prompts, 16), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["swaps_out"].get<int64_t>(), 0);
  EXPECT_GT(s["tiers"]["disk"]["peak_bytes"].get<int64_t>(), 0) << s.dump();
}

TEST(TiersTest, RecomputeAndAutoAreExact) {
  auto prompts = SomePrompts(6, 30);
  auto expected = testing::Reference(prompts, 16);
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kAuto}) {
    EngineOptions o = Options(/*gpu=*/14, /*host=*/8);
    o.preemption = mode;
    auto engine = MakeEngine(o);
    EXPECT_EQ(RunAll(*engine, prompts, 16), expected);
    nlohmann::json s = engine->Stats();
    EXPECT_GT(s["preemptions"].get<int64_t>(), 0);
    if (mode == PreemptionMode::kRecompute) {
      EXPECT_EQ(s["swaps_out"], 0);
    }
  }
}

TEST(TiersTest, PrefixIsReusedFromEveryTier) {
  const std::vector<int32_t> shared = Prompt(99, 16);  // four full blocks
  std::vector<std::vector<int32_t>> first = {Prompt(1, 3, shared)};
  std::vector<std::vector<int32_t>> later = {Prompt(2, 5, shared), Prompt(3, 2, shared)};
  auto expected = testing::Reference(later, 8);
  // Device hit: same context, the first sequence's blocks are still cached on the device.
  {
    auto engine = MakeEngine(Options(64));
    RunAll(*engine, first, 4);
    EXPECT_EQ(RunAll(*engine, later, 8), expected);
    EXPECT_GE(engine->Stats()["prefix_hits"]["gpu"].get<int64_t>(), 4);
  }
  // Host hit: filler traffic evicts the shared blocks from the small device tier to host.
  {
    auto engine = MakeEngine(Options(12, 64));
    RunAll(*engine, first, 4);
    RunAll(*engine, {Prompt(50, 30)}, 4);
    EXPECT_EQ(RunAll(*engine, later, 8), expected);
    nlohmann::json s = engine->Stats();
    EXPECT_GT(s["prefix_hits"]["host"].get<int64_t>(), 0) << s.dump();
  }
}

TEST(TiersTest, RestartFindsPrefixOnDiskAndDetectsCorruption) {
  const std::string path = testing::TestTempDir() + "/restart.kv";
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".index");
  const std::vector<int32_t> shared = Prompt(77, 20);
  auto expected = testing::Reference({Prompt(5, 3, shared)}, 8);
  {
    auto engine = MakeEngine(Options(64, 0, 64, path));
    RunAll(*engine, {Prompt(4, 3, shared)}, 4);
  }  // destroying the context writes the cached prefix blocks to disk and the index
  {
    auto engine = MakeEngine(Options(64, 0, 64, path));
    EXPECT_EQ(RunAll(*engine, {Prompt(5, 3, shared)}, 8), expected);
    nlohmann::json s = engine->Stats();
    EXPECT_GE(s["prefix_hits"]["disk"].get<int64_t>(), 5) << s.dump();
  }
  // Corrupt every slot's payload on disk: the next context detects it and recomputes.
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    for (long offset = 200; offset < size; offset += 1024) {
      std::fseek(f, offset, SEEK_SET);
      int c = std::fgetc(f);
      std::fseek(f, offset, SEEK_SET);
      std::fputc(c ^ 0x10, f);
    }
    std::fclose(f);
  }
  {
    auto engine = MakeEngine(Options(64, 0, 64, path));
    EXPECT_EQ(RunAll(*engine, {Prompt(5, 3, shared)}, 8), expected);
    nlohmann::json s = engine->Stats();
    EXPECT_GT(s["corrupt_blocks_detected"].get<int64_t>(), 0) << s.dump();
    EXPECT_EQ(s["prefix_hits"]["disk"], 0);
  }
}

TEST(TiersTest, AnotherModelIgnoresTheDiskFile) {
  const std::string path = testing::TestTempDir() + "/other-model.kv";
  const std::vector<int32_t> shared = Prompt(78, 20);
  {
    auto engine = MakeEngine(Options(64, 0, 64, path));
    RunAll(*engine, {Prompt(4, 3, shared)}, 4);
  }
  EngineOptions o = Options(64, 0, 64, path);
  auto other = Engine::Create(testing::OpenCheckpoint(testing::TinyLlamaDir(/*seed=*/8)), o);
  ASSERT_TRUE(other.ok()) << other.status();
  RunAll(**other, {Prompt(5, 3, shared)}, 4);
  EXPECT_EQ((*other)->Stats()["prefix_hits"]["disk"], 0);
}

TEST(TiersTest, DiskFaultsNeverCorruptOutput) {
  testing::ExpectDiskFaultsNeverCorruptOutput([](EngineOptions o) { return MakeEngine(o); });
}

TEST(TiersTest, PinnedPrefixStaysOnDeviceUnderPressure) {
  const std::vector<int32_t> shared = Prompt(123, 16);  // four full blocks
  EngineOptions o = Options(/*gpu=*/14);
  auto engine = MakeEngine(o);
  SamplingParams pinned = Greedy(2);
  pinned.pin_prefix = true;
  ASSERT_TRUE(engine->Add(Prompt(1, 2, shared), pinned).ok());
  RunAll(*engine, {}, 2);
  EXPECT_EQ(engine->Stats()["pinned_blocks"], 4);
  RunAll(*engine, SomePrompts(4, 300), 12);  // heavy traffic that would evict everything
  RunAll(*engine, {Prompt(2, 3, shared)}, 2);
  nlohmann::json s = engine->Stats();
  EXPECT_GE(s["prefix_hits"]["gpu"].get<int64_t>(), 4) << s.dump();
  engine->UnpinPrefixes();
  EXPECT_EQ(engine->Stats()["pinned_blocks"], 0);
  EXPECT_TRUE(engine->VerifyIntegrity().ok());
}

TEST(TiersTest, RandomAddCancelStepKeepsInvariants) {
  const std::string path = testing::TestTempDir() + "/random.kv";
  // The seeds differ only in the random workload on one configuration: the sanitizer builds
  // (several times slower) run the first, the normal build all three.
  const std::vector<uint32_t> seeds = testing::kSanitized ? std::vector<uint32_t>{1} : std::vector<uint32_t>{1, 2, 3};
  for (uint32_t seed : seeds) {
    FakeFileIo io;  // in memory: thousands of durable writes would only measure fsync
    EngineOptions o = Options(/*gpu=*/12, /*host=*/6, /*disk=*/40, path + std::to_string(seed));
    o.file_io = &io;
    o.max_tokens_per_step = 9;
    auto engine = MakeEngine(o);
    ASSERT_NO_FATAL_FAILURE(testing::RunRandomOps(*engine, seed, 700));
    nlohmann::json s = engine->Stats();
    EXPECT_EQ(s["sequences"]["running"], 0);
  }
}

}  // namespace
}  // namespace kvtier
