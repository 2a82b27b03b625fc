// The engine with KV layer groups (option kv_layer_groups, docs/ARCHITECTURE.md "Layer
// groups") on tiny random Gemma 2 and Gemma 3 checkpoints: generation emits exactly the
// tokens it emits with one group, also when a small pool makes sequences recompute; the
// stats show the blocks the windows gave back; the same KV bytes run more sequences at once;
// sequences swapped to the host or the disk tier come back to the same tokens, and so do
// prefixes whose group entries were evicted to those tiers or put to Redis, and forked
// completions, and a sequence longer than the device tier, read partly from the host tier;
// random operations over all of these keep the KV invariants; and a context
// whose other options or backend cannot carry groups keeps one.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "engine/engine.h"
#include "engine/kv_layer_groups_choice.h"
#include "gtest/gtest.h"
#include "kv/tier_test_util.h"
#include "model/random_checkpoint.h"
#include "storage/disk_block_store.h"
#include "testing/engine_runs.h"
#include "testing/fake_file_io.h"
#include "testing/redis_server.h"
#include "testing/test_model.h"

namespace kvtier {
namespace {

using testing::Greedy;
using testing::Prompt;
using testing::Stat;

struct GroupedFamily {
  std::string name;
  RandomCheckpointSpec spec;
};

std::vector<GroupedFamily> GroupedFamilies() {
  RandomCheckpointSpec base;
  base.hidden = 64;
  base.heads = 4;
  base.kv_heads = 2;
  base.head_dim = 16;
  base.intermediate = 96;
  base.vocab = 512;
  base.max_positions = 256;
  base.tie_embeddings = true;
  RandomCheckpointSpec gemma2 = base;  // local and global layers alternate: two groups of two
  gemma2.arch = Architecture::kGemma2;
  gemma2.layers = 4;
  gemma2.sliding_window = 5;
  gemma2.query_pre_attn_scalar = 24;
  gemma2.attn_logit_softcap = 2.0;
  gemma2.final_logit_softcap = 4.0;
  RandomCheckpointSpec gemma3 = base;  // five local layers, then a global one: six groups
  gemma3.arch = Architecture::kGemma3;
  gemma3.layers = 6;
  gemma3.sliding_window_pattern = 6;
  gemma3.sliding_window = 6;
  gemma3.rope_theta = 1000000.0;
  gemma3.rope_local_theta = 10.0;
  return {{"gemma2", gemma2}, {"gemma3", gemma3}};
}

// The family's checkpoint directory, written once per process.
std::string GroupedCheckpointDir(const GroupedFamily& f) {
  static std::map<std::string, std::string>* dirs = new std::map<std::string, std::string>();
  auto it = dirs->find(f.name);
  if (it != dirs->end()) return it->second;
  const std::string dir = absl::StrCat(::testing::TempDir(), "/kvtier_kv_layer_groups_", getpid(), "_", f.name);
  const absl::Status written = WriteRandomCheckpoint(f.spec, dir);
  EXPECT_TRUE(written.ok()) << written;
  return dirs->emplace(f.name, dir).first->second;
}

// Bytes of one block holding every layer (4 tokens, f32 K and V).
int64_t GroupedFullBlockBytes(const GroupedFamily& f) {
  return f.spec.layers * 2 * f.spec.kv_heads * 4 * f.spec.head_dim * 4;
}

EngineOptions GroupOptions(bool groups, int64_t kv_bytes) {
  EngineOptions options = testing::CpuOptions(/*block_tokens=*/4);
  options.gpu_kv_bytes = kv_bytes;
  options.prefix_cache = false;
  options.kv_layer_groups = groups;
  options.max_tokens_per_step = 16;  // prompts prefill in several chunks
  return options;
}

struct GroupedRun {
  std::map<SequenceId, std::vector<int32_t>> tokens;
  int64_t groups = 0;
  int64_t freed_by_window = 0;
  int64_t preemptions = 0;
  int64_t most_running = 0;
  int64_t swaps_out = 0;
  int64_t swaps_in = 0;
  int64_t swap_out_bytes = 0;
  int64_t disk_swap_writes = 0;
  int64_t swap_prefetches = 0;
  int64_t moved_to_host = 0;
  int64_t block_bytes = 0;
};

GroupedRun GenerateGrouped(const GroupedFamily& f, const EngineOptions& options, int num_prompts, int prompt_tokens, int max_new) {
  GroupedRun run;
  auto engine = testing::MakeEngine(options, GroupedCheckpointDir(f));
  if (engine == nullptr) return run;
  for (int i = 0; i < num_prompts; ++i) {
    EXPECT_TRUE(engine->Add(Prompt(40 + i, prompt_tokens + i), Greedy(max_new)).ok());
  }
  for (int step = 0; step < 5000 && engine->NumUnfinished() > 0; ++step) {
    testing::StepAndCollect(*engine, &run.tokens, /*verify=*/true);
    if (::testing::Test::HasFatalFailure()) return run;
    run.most_running = std::max(run.most_running, Stat(engine->Stats(), "sequences", "running"));
  }
  EXPECT_EQ(engine->NumUnfinished(), 0);
  const nlohmann::json stats = engine->Stats();
  run.groups = Stat(stats, "kv_layer_groups", "groups");
  run.freed_by_window = Stat(stats, "kv_layer_groups", "blocks_freed_by_window");
  run.preemptions = Stat(stats, "preemptions");
  run.swaps_out = Stat(stats, "swaps_out");
  run.swaps_in = Stat(stats, "swaps_in");
  run.swap_out_bytes = Stat(stats, "swap_out_bytes");
  run.disk_swap_writes = Stat(stats, "disk_swap_writes");
  run.swap_prefetches = Stat(stats, "swap_prefetches");
  run.moved_to_host = Stat(stats, "blocks_moved_to_host");
  run.block_bytes = static_cast<int64_t>(engine->backend().kv_layout().BlockBytes());
  return run;
}

class KvLayerGroupsTest : public ::testing::TestWithParam<GroupedFamily> {};

TEST_P(KvLayerGroupsTest, GroupsEmitTheTokensOfOneGroupAndFreeWindowBlocks) {
  const GroupedFamily& f = GetParam();
  const int64_t bytes = 64 * GroupedFullBlockBytes(f);  // room for every sequence at once
  const GroupedRun one = GenerateGrouped(f, GroupOptions(false, bytes), 3, 21, 12);
  const GroupedRun grouped = GenerateGrouped(f, GroupOptions(true, bytes), 3, 21, 12);
  ASSERT_EQ(one.tokens.size(), 3u);
  EXPECT_EQ(grouped.tokens, one.tokens);
  EXPECT_EQ(one.groups, 1);
  EXPECT_EQ(one.freed_by_window, 0);
  EXPECT_EQ(grouped.groups, f.spec.layers / (f.name == "gemma2" ? 2 : 1));
  EXPECT_GT(grouped.freed_by_window, 0);
}

TEST_P(KvLayerGroupsTest, SmallPoolRecomputesToTheSameTokens) {
  const GroupedFamily& f = GetParam();
  const GroupedRun reference = GenerateGrouped(f, GroupOptions(false, 64 * GroupedFullBlockBytes(f)), 5, 22, 16);
  // One sequence's 38 positions are 10 blocks: five need 50, the pool has 14.
  const int64_t small = 14 * GroupedFullBlockBytes(f);
  const GroupedRun one = GenerateGrouped(f, GroupOptions(false, small), 5, 22, 16);
  const GroupedRun grouped = GenerateGrouped(f, GroupOptions(true, small), 5, 22, 16);
  ASSERT_EQ(reference.tokens.size(), 5u);
  EXPECT_EQ(one.tokens, reference.tokens);
  EXPECT_EQ(grouped.tokens, reference.tokens);
  EXPECT_GT(one.preemptions, 0) << "control: the small pool preempts";
  EXPECT_GT(grouped.preemptions, 0) << "grouped sequences recompute too";
  EXPECT_GT(grouped.freed_by_window, 0);
}

TEST_P(KvLayerGroupsTest, SameBytesRunMoreSequencesAtOnce) {
  const GroupedFamily& f = GetParam();
  // Sequences of 60 positions (15 blocks): a pool of 24 blocks runs one at its peak.
  const int64_t bytes = 24 * GroupedFullBlockBytes(f);
  const GroupedRun one = GenerateGrouped(f, GroupOptions(false, bytes), 6, 36, 24);
  const GroupedRun grouped = GenerateGrouped(f, GroupOptions(true, bytes), 6, 36, 24);
  EXPECT_EQ(grouped.tokens, one.tokens);
  EXPECT_GT(grouped.most_running, one.most_running);
  EXPECT_LT(grouped.preemptions, one.preemptions);
}

TEST_P(KvLayerGroupsTest, ParallelSamplesShareTheirPromptsBlocks) {
  // The completions of one prompt fork from the first once it has computed the prompt:
  // with groups too, each shares every group's full blocks its next query reads and copies
  // the partial ones, to the tokens of one group.
  const GroupedFamily& f = GetParam();
  std::map<SequenceId, std::vector<int32_t>> tokens[2];
  for (int grouped = 0; grouped < 2; ++grouped) {
    auto engine = testing::MakeEngine(GroupOptions(grouped == 1, 64 * GroupedFullBlockBytes(f)), GroupedCheckpointDir(f));
    ASSERT_TRUE(engine != nullptr);
    SamplingParams params = Greedy(10);
    params.n = 3;
    ASSERT_TRUE(engine->Add(Prompt(7, 19), params).ok());
    tokens[grouped] = testing::RunToEnd(*engine, /*verify=*/true, /*max_steps=*/1000);
    const nlohmann::json stats = engine->Stats();
    EXPECT_EQ(Stat(stats, "parallel_sampling", "forks"), 2);
    EXPECT_GT(Stat(stats, "parallel_sampling", "shared_blocks"), 0);
    EXPECT_EQ(Stat(stats, "parallel_sampling", "copied_blocks"), 2 * Stat(stats, "kv_layer_groups", "groups"))
        << "19 positions: one partial block a group";
    if (grouped == 1) {
      EXPECT_GT(Stat(stats, "kv_layer_groups", "blocks_freed_by_window"), 0);
    }
  }
  EXPECT_EQ(tokens[0].size(), 3u);
  EXPECT_EQ(tokens[1], tokens[0]);
}

// Where swapped sequences go: host slots, disk slots, or a host tier too small for them
// all, whose overflow goes to disk (and is read ahead back into host slots).
enum class SwapTiers { kHost, kDisk, kHostThenDisk };

// A small pool under swap pressure: one group and groups emit the unpressured tokens, and
// groups swap only blocks of one group's layers.
void ExpectSwapsKeepTheTokens(const GroupedFamily& f, SwapTiers tiers) {
  const GroupedRun reference = GenerateGrouped(f, GroupOptions(false, 64 * GroupedFullBlockBytes(f)), 5, 22, 16);
  ASSERT_EQ(reference.tokens.size(), 5u);
  for (bool groups : {false, true}) {
    SCOPED_TRACE(groups ? "groups" : "one group");
    EngineOptions options = GroupOptions(groups, 14 * GroupedFullBlockBytes(f));
    options.preemption = PreemptionMode::kSwap;
    if (tiers != SwapTiers::kDisk) options.host_kv_bytes = (tiers == SwapTiers::kHost ? 64 : 3) * GroupedFullBlockBytes(f);
    if (tiers != SwapTiers::kHost) {
      options.disk_path = absl::StrCat(::testing::TempDir(), "/kvtier_grouped_swap_", getpid(), "_", f.name,
                                       groups ? "_groups" : "_one", ".kv");
      std::filesystem::remove(options.disk_path);
      options.disk_kv_bytes = 64 * GroupedFullBlockBytes(f);
    }
    const GroupedRun run = GenerateGrouped(f, options, 5, 22, 16);
    if (tiers == SwapTiers::kHost) {
      EXPECT_EQ(run.disk_swap_writes, 0);
      EXPECT_GT(run.swap_prefetches, 0) << "swapped blocks come back ahead of their step too";
    } else if (tiers == SwapTiers::kDisk) {
      // Every block a swap-out counts is one slot the disk writer wrote.
      EXPECT_EQ(run.disk_swap_writes * run.block_bytes, run.swap_out_bytes);
    } else {
      EXPECT_GT(run.disk_swap_writes, 0);
      EXPECT_LT(run.disk_swap_writes * run.block_bytes, run.swap_out_bytes);
    }
    EXPECT_EQ(run.tokens, reference.tokens);
    EXPECT_EQ(run.groups, groups ? f.spec.layers / (f.name == "gemma2" ? 2 : 1) : 1);
    EXPECT_GT(run.swaps_out, 0);
    EXPECT_EQ(run.swaps_in, run.swaps_out);
    EXPECT_EQ(run.block_bytes, GroupedFullBlockBytes(f) / run.groups);
    EXPECT_EQ(run.swap_out_bytes % run.block_bytes, 0);
    if (groups) {
      EXPECT_GT(run.freed_by_window, 0);
    }
  }
}

TEST_P(KvLayerGroupsTest, HostTierSwapsEmitTheSameTokens) { ExpectSwapsKeepTheTokens(GetParam(), SwapTiers::kHost); }

TEST_P(KvLayerGroupsTest, DiskTierSwapsEmitTheSameTokens) { ExpectSwapsKeepTheTokens(GetParam(), SwapTiers::kDisk); }

TEST_P(KvLayerGroupsTest, HostOverflowSwapsToDiskEmitTheSameTokens) {
  ExpectSwapsKeepTheTokens(GetParam(), SwapTiers::kHostThenDisk);
}

// A grouped sequence's swap record torn on disk (the write reported success, the checksum
// disagrees): its swap-in finds it corrupt and the sequence is computed again, to the
// tokens it emits unpressured.
TEST_P(KvLayerGroupsTest, TornDiskSwapRecordIsComputedAgain) {
  const GroupedFamily& f = GetParam();
  const GroupedRun reference = GenerateGrouped(f, GroupOptions(false, 64 * GroupedFullBlockBytes(f)), 5, 22, 16);
  FakeFileIo io;
  EngineOptions options = GroupOptions(true, 14 * GroupedFullBlockBytes(f));
  options.preemption = PreemptionMode::kSwap;
  options.disk_path = "/fake/grouped-torn-swap.kv";
  options.disk_kv_bytes = 64 * GroupedFullBlockBytes(f);
  options.file_io = &io;
  auto engine = testing::MakeEngine(options, GroupedCheckpointDir(f));
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine->Add(Prompt(40 + i, 22 + i), Greedy(16)).ok());
  // The next block write, a swap's first (nothing else is written: no prefix cache), keeps
  // its header and loses the rest.
  io.TornWriteNext(SlotHeaderBytes(4) + 8);
  std::map<SequenceId, std::vector<int32_t>> tokens;
  for (int step = 0; step < 5000 && engine->NumUnfinished() > 0; ++step) {
    testing::StepAndCollect(*engine, &tokens, /*verify=*/true);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(tokens, reference.tokens);
  const nlohmann::json stats = engine->Stats();
  EXPECT_GT(Stat(stats, "swaps_out"), 0);
  EXPECT_EQ(Stat(stats, "corrupt_blocks_detected"), 1);
  EXPECT_GT(Stat(stats, "recomputes"), 0);
}

// A sequence longer than the device tier: its full-attention groups' oldest blocks move
// to the host tier and are read there, its windowed groups keep only their windows, and it
// emits the tokens of a run with room on the device, its invariants checked every step.
TEST_P(KvLayerGroupsTest, LongSequenceReadsHostResidentBlocks) {
  const GroupedFamily& f = GetParam();
  const GroupedRun roomy = GenerateGrouped(f, GroupOptions(true, 64 * GroupedFullBlockBytes(f)), 1, 60, 20);
  ASSERT_GT(roomy.groups, 1);
  EXPECT_EQ(roomy.moved_to_host, 0);
  // Six logical blocks of every group: the windows and a few chunks' blocks, not the 20
  // logical blocks of the whole sequence.
  EngineOptions options = GroupOptions(true, 6 * roomy.groups * roomy.block_bytes);
  options.host_kv_bytes = 64 * roomy.block_bytes;
  options.watermark_blocks = 0;
  const GroupedRun small = GenerateGrouped(f, options, 1, 60, 20);
  EXPECT_EQ(small.groups, roomy.groups);
  EXPECT_GT(small.moved_to_host, 0);
  EXPECT_GT(small.freed_by_window, 0);
  EXPECT_EQ(small.preemptions, 0);
  EXPECT_EQ(small.tokens, roomy.tokens);
}

TEST_P(KvLayerGroupsTest, TiersThatKeepGroups) {
  const GroupedFamily& f = GetParam();
  const std::shared_ptr<const Checkpoint> checkpoint = testing::OpenCheckpoint(GroupedCheckpointDir(f));
  ASSERT_NE(checkpoint, nullptr);
  EngineOptions options = GroupOptions(true, 64 * GroupedFullBlockBytes(f));
  options.host_kv_bytes = 1 << 20;
  options.disk_kv_bytes = 1 << 20;
  options.disk_path = "/unused/by/the/choice.kv";
  absl::StatusOr<KvLayerGroupsChoice> tiers = ChooseKvLayerGroups(options, checkpoint->config());
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_TRUE(tiers->groups.has_value());
  EXPECT_EQ(tiers->why_one_group, "");
  options.prefix_cache = true;
  absl::StatusOr<KvLayerGroupsChoice> cached = ChooseKvLayerGroups(options, checkpoint->config());
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_TRUE(cached->groups.has_value()) << "prefix entries of groups on the host and disk tiers";
  EXPECT_EQ(cached->why_one_group, "");
  options.host_kv_bytes = 0;
  options.disk_kv_bytes = 0;
  cached = ChooseKvLayerGroups(options, checkpoint->config());
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_TRUE(cached->groups.has_value()) << "prefix entries on the device tier";
  options.remote.url = "redis://127.0.0.1:1";
  absl::StatusOr<KvLayerGroupsChoice> remote = ChooseKvLayerGroups(options, checkpoint->config());
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_TRUE(remote->groups.has_value()) << "prefix entries of groups in the remote tier";
  EXPECT_EQ(remote->why_one_group, "");
}

// Prompts sharing a prefix, one after another: with the prefix cache each reuses the
// blocks the earlier ones computed — with groups only where every block its next query
// reads is still cached in every group — and every run emits the tokens of a run without
// the cache.
TEST_P(KvLayerGroupsTest, PrefixHitsEmitTheTokensOfOneGroup) {
  const GroupedFamily& f = GetParam();
  const std::vector<int32_t> shared = Prompt(77, 26);
  const std::vector<std::vector<int32_t>> prompts = {Prompt(1, 5, shared), Prompt(2, 9, shared), Prompt(3, 2, shared)};
  std::map<SequenceId, std::vector<int32_t>> tokens[3];
  int64_t hits[3] = {};
  for (int run = 0; run < 3; ++run) {  // no prefix cache; one group; groups
    EngineOptions options = GroupOptions(run == 2, 64 * GroupedFullBlockBytes(f));
    options.prefix_cache = run > 0;
    auto engine = testing::MakeEngine(options, GroupedCheckpointDir(f));
    ASSERT_NE(engine, nullptr);
    for (const std::vector<int32_t>& prompt : prompts) {
      ASSERT_TRUE(engine->Add(prompt, Greedy(10)).ok());
      for (auto& [id, emitted] : testing::RunToEnd(*engine, /*verify=*/true)) tokens[run][id] = emitted;
    }
    const nlohmann::json stats = engine->Stats();
    hits[run] = Stat(stats, "prefix_hits", "gpu");
    EXPECT_EQ(Stat(stats, "kv_layer_groups", "groups") > 1, run == 2);
  }
  ASSERT_EQ(tokens[0].size(), 3u);
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(tokens[2], tokens[0]);
  EXPECT_EQ(hits[0], 0);
  EXPECT_GT(hits[1], 0);
  EXPECT_GT(hits[2], 0);
}

// Runs the prompts one after another in a new engine; their tokens, and its stats after.
std::map<SequenceId, std::vector<int32_t>> RunOneByOne(const GroupedFamily& f, const EngineOptions& options,
                                                       const std::vector<std::vector<int32_t>>& prompts,
                                                       nlohmann::json* stats) {
  std::map<SequenceId, std::vector<int32_t>> tokens;
  auto engine = testing::MakeEngine(options, GroupedCheckpointDir(f));
  EXPECT_NE(engine, nullptr);
  if (engine == nullptr) return tokens;
  for (const std::vector<int32_t>& prompt : prompts) {
    EXPECT_TRUE(engine->Add(prompt, Greedy(10)).ok());
    for (auto& [id, emitted] : testing::RunToEnd(*engine, /*verify=*/true)) tokens[id] = emitted;
  }
  *stats = engine->Stats();
  return tokens;
}

// Where a small device pool's prefix entries go: host slots, disk slots, or a small host
// tier that sends its own victims on to disk.
enum class PrefixTiers { kHost, kDisk, kHostAndDisk };

// Prompts sharing a prefix, each after two others that push the shared blocks off a small
// device pool: with the prefix cache and host and/or disk tiers, the shared prefix comes
// back from there — with groups, each group's blocks that the next query reads — and every
// run emits the tokens of a run without the cache.
// With `load_plans` a prefix only the disk holds may be split, its front computed while its
// back loads (by measured speeds: how it splits is the kv tests' to check), to the same tokens.
void ExpectPrefixEntriesBelowKeepTheTokens(const GroupedFamily& f, PrefixTiers tiers, bool load_plans = false) {
  const std::vector<int32_t> shared = Prompt(77, 26);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(Prompt(1 + i, 5 + 2 * i, shared));
    prompts.push_back(Prompt(300 + i, 28));
    prompts.push_back(Prompt(400 + i, 29));
  }
  nlohmann::json stats;
  const std::map<SequenceId, std::vector<int32_t>> reference =
      RunOneByOne(f, GroupOptions(false, 64 * GroupedFullBlockBytes(f)), prompts, &stats);
  ASSERT_EQ(reference.size(), prompts.size());
  for (bool groups : {false, true}) {
    SCOPED_TRACE(groups ? "groups" : "one group");
    EngineOptions options = GroupOptions(groups, 12 * GroupedFullBlockBytes(f));
    options.prefix_cache = true;
    options.load_or_recompute = load_plans;  // without: every hit below is loaded
    if (tiers != PrefixTiers::kDisk) {
      options.host_kv_bytes = (tiers == PrefixTiers::kHost ? 64 : 4) * GroupedFullBlockBytes(f);
    }
    // A directory of its own: the disk store's index and journal lie beside its file.
    const std::string dir =
        absl::StrCat(::testing::TempDir(), "/kvtier_grouped_prefix_", getpid(), "_", f.name, "_",
                     static_cast<int>(tiers), groups ? "_groups" : "_one", load_plans ? "_plans" : "");
    if (tiers != PrefixTiers::kHost) {
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      options.disk_path = dir + "/kv";
      options.disk_kv_bytes = 64 * GroupedFullBlockBytes(f);
    }
    EXPECT_EQ(RunOneByOne(f, options, prompts, &stats), reference);
    EXPECT_EQ(Stat(stats, "kv_layer_groups", "groups") > 1, groups);
    // The small host tier sends its victims on to disk, where the next prompt finds them
    // (a plan may compute all it found).
    const int64_t hits = Stat(stats, "prefix_hits", tiers == PrefixTiers::kHost ? "host" : "disk");
    EXPECT_GT(hits + (load_plans ? Stat(stats, "load_plans", "plans") : 0), 0) << stats.dump();
    EXPECT_EQ(Stat(stats, "corrupt_blocks_detected"), 0);
    if (tiers != PrefixTiers::kHost) std::filesystem::remove_all(dir);
  }
}

TEST_P(KvLayerGroupsTest, PrefixEntriesOnTheHostEmitTheTokensOfOneGroup) {
  ExpectPrefixEntriesBelowKeepTheTokens(GetParam(), PrefixTiers::kHost);
}

TEST_P(KvLayerGroupsTest, PrefixEntriesOnDiskEmitTheTokensOfOneGroup) {
  ExpectPrefixEntriesBelowKeepTheTokens(GetParam(), PrefixTiers::kDisk);
}

TEST_P(KvLayerGroupsTest, PrefixEntriesOnDiskUnderLoadPlansEmitTheTokensOfOneGroup) {
  ExpectPrefixEntriesBelowKeepTheTokens(GetParam(), PrefixTiers::kDisk, /*load_plans=*/true);
}

TEST_P(KvLayerGroupsTest, PrefixEntriesOnTheHostAndDiskEmitTheTokensOfOneGroup) {
  ExpectPrefixEntriesBelowKeepTheTokens(GetParam(), PrefixTiers::kHostAndDisk);
}

// A grouped context puts its prefix entries to Redis (a redis-server this test starts on a
// loopback port; skipped, saying why, only when it is not installed): a fresh context — a
// restart, or another process — running the same prompts loads each group's blocks from
// there, and both emit the tokens of a run without any cache.
TEST_P(KvLayerGroupsTest, PrefixEntriesInRedisEmitTheTokensOfOneGroup) {
  const std::string why = testing::RedisMissingReason();
  if (!why.empty()) GTEST_SKIP() << why;
  const GroupedFamily& f = GetParam();
  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  const std::vector<int32_t> shared = Prompt(77, 26);
  const std::vector<std::vector<int32_t>> prompts = {Prompt(1, 5, shared), Prompt(2, 9, shared)};
  nlohmann::json stats;
  const std::map<SequenceId, std::vector<int32_t>> reference =
      RunOneByOne(f, GroupOptions(false, 64 * GroupedFullBlockBytes(f)), prompts, &stats);
  ASSERT_EQ(reference.size(), prompts.size());
  EngineOptions options = GroupOptions(true, 64 * GroupedFullBlockBytes(f));
  options.prefix_cache = true;
  options.remote.url = redis.url();
  options.remote.timeout_ms = 500;  // generous: CI machines are shared (sanitizer builds are slow)
  EXPECT_EQ(RunOneByOne(f, options, prompts, &stats), reference);
  EXPECT_GT(Stat(stats, "kv_layer_groups", "groups"), 1);
  EXPECT_EQ(Stat(stats, "prefix_hits", "remote"), 0);
  EXPECT_EQ(RunOneByOne(f, options, prompts, &stats), reference);
  EXPECT_GT(Stat(stats, "prefix_hits", "remote"), 0) << stats.dump();
  EXPECT_GT(Stat(stats, "remote", "hits"), 0);
  EXPECT_EQ(Stat(stats, "remote", "corrupt"), 0);
  EXPECT_EQ(Stat(stats, "corrupt_blocks_detected"), 0);
}

// Random adds (half over a shared prefix), cancels and steps over a small pool with the
// prefix cache, host and disk tiers and swaps: the KV invariants hold after each.
TEST_P(KvLayerGroupsTest, RandomOpsWithPrefixEntriesBelowKeepTheInvariants) {
  const GroupedFamily& f = GetParam();
  FakeFileIo io;
  EngineOptions options = GroupOptions(true, 12 * GroupedFullBlockBytes(f));
  options.prefix_cache = true;
  options.preemption = PreemptionMode::kSwap;
  options.host_kv_bytes = 4 * GroupedFullBlockBytes(f);
  options.disk_kv_bytes = 40 * GroupedFullBlockBytes(f);
  options.disk_path = "/fake/grouped-random-ops.kv";
  options.file_io = &io;
  options.max_tokens_per_step = 9;
  auto engine = testing::MakeEngine(options, GroupedCheckpointDir(f));
  ASSERT_NE(engine, nullptr);
  ASSERT_NO_FATAL_FAILURE(testing::RunRandomOps(*engine, /*seed=*/1, 500));
  const nlohmann::json stats = engine->Stats();
  EXPECT_GT(Stat(stats, "kv_layer_groups", "groups"), 1);
  EXPECT_GT(Stat(stats, "prefix_hits", "host") + Stat(stats, "prefix_hits", "disk"), 0) << stats.dump();
}

TEST_P(KvLayerGroupsTest, OptionsThatCannotCarryGroupsKeepOne) {
  const GroupedFamily& f = GetParam();
  EngineOptions options = GroupOptions(true, 64 * GroupedFullBlockBytes(f));
  options.tensor_parallel = 2;  // the sharded plan reads one group
  const GroupedRun run = GenerateGrouped(f, options, 2, 13, 4);
  EXPECT_EQ(run.groups, 1);
  EXPECT_EQ(run.freed_by_window, 0);
  EXPECT_EQ(run.tokens.size(), 2u);
}

// The log lines at Warning and above, while it lives.
class WarningLines {
 public:
  WarningLines() { EXPECT_TRUE(SetLogSink(&WarningLines::Sink, this, static_cast<int32_t>(LogLevel::kWarn)).ok()); }
  ~WarningLines() { EXPECT_TRUE(SetLogSink(nullptr, nullptr, 0).ok()); }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  static void Sink(void* user, int32_t level, const char* message) {
    auto* self = static_cast<WarningLines*>(user);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->lines_.emplace_back(message);
  }
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// Groups asked for (the default's value) group on every backend of one rank: the CPU and
// CUDA backends read a grouped layout, and "auto" picks one of them. The sharded plans
// (tensor_parallel above 1, sharded_reduction) keep one group, saying why. A context on
// "auto" groups, without a warning about it, and generates what it does with one group.
TEST_P(KvLayerGroupsTest, GroupsAskedForGroupOnOneRankOfAnyBackend) {
  const GroupedFamily& f = GetParam();
  const std::shared_ptr<const Checkpoint> checkpoint = testing::OpenCheckpoint(GroupedCheckpointDir(f));
  ASSERT_NE(checkpoint, nullptr);
  EngineOptions options = GroupOptions(true, 64 * GroupedFullBlockBytes(f));
  for (const std::string backend : {"cpu", "cuda", "auto"}) {
    SCOPED_TRACE(backend);
    options.backend = backend;
    options.tensor_parallel = 1;
    options.sharded_reduction = false;
    const absl::StatusOr<KvLayerGroupsChoice> choice = ChooseKvLayerGroups(options, checkpoint->config());
    ASSERT_TRUE(choice.ok()) << choice.status();
    ASSERT_TRUE(choice->groups.has_value());
    EXPECT_GT(choice->groups->num_groups(), 1);
    EXPECT_EQ(choice->why_one_group, "");
    options.tensor_parallel = 2;
    const absl::StatusOr<KvLayerGroupsChoice> sharded = ChooseKvLayerGroups(options, checkpoint->config());
    ASSERT_TRUE(sharded.ok()) << sharded.status();
    EXPECT_FALSE(sharded->groups.has_value());
    EXPECT_NE(sharded->why_one_group.find("sharded plan"), std::string::npos) << sharded->why_one_group;
    options.tensor_parallel = 1;
    options.sharded_reduction = true;
    const absl::StatusOr<KvLayerGroupsChoice> reduced = ChooseKvLayerGroups(options, checkpoint->config());
    ASSERT_TRUE(reduced.ok()) << reduced.status();
    EXPECT_FALSE(reduced->groups.has_value());
    EXPECT_NE(reduced->why_one_group.find("sharded_reduction"), std::string::npos) << reduced->why_one_group;
  }
  // A model without windows has nothing to group, and nothing to say why.
  const std::shared_ptr<const Checkpoint> llama = testing::OpenCheckpoint(testing::TinyLlamaDir());
  ASSERT_NE(llama, nullptr);
  options.backend = "cuda";
  options.tensor_parallel = 1;
  options.sharded_reduction = false;
  const absl::StatusOr<KvLayerGroupsChoice> unwindowed = ChooseKvLayerGroups(options, llama->config());
  ASSERT_TRUE(unwindowed.ok()) << unwindowed.status();
  EXPECT_FALSE(unwindowed->groups.has_value());
  EXPECT_EQ(unwindowed->why_one_group, "");

  options.backend = "auto";
  std::map<SequenceId, std::vector<int32_t>> grouped;
  {
    WarningLines warnings;
    const GroupedRun run = GenerateGrouped(f, options, 2, 13, 4);
    EXPECT_GT(run.groups, 1);
    EXPECT_GT(run.freed_by_window, 0);
    // "auto" may warn that it fell back to the CPU; the grouping adds nothing to that.
    for (const std::string& line : warnings.lines()) EXPECT_EQ(line.find("group"), std::string::npos) << line;
    grouped = run.tokens;
  }
  EngineOptions one_group = GroupOptions(false, 64 * GroupedFullBlockBytes(f));
  one_group.backend = "auto";  // the same backend as the grouped run, whichever it is
  EXPECT_EQ(GenerateGrouped(f, one_group, 2, 13, 4).tokens, grouped);
}

INSTANTIATE_TEST_SUITE_P(Families, KvLayerGroupsTest, ::testing::ValuesIn(GroupedFamilies()),
                         [](const ::testing::TestParamInfo<GroupedFamily>& info) { return info.param.name; });

}  // namespace
}  // namespace kvtier
