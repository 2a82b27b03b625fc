// Liveness and exactness under every tier configuration: the reproductions of the three
// defects an independent check of the C API found (a scheduler that stopped for good under
// swap preemption, two contexts sharing one disk file, huge budgets allocated before being
// refused), and a property test over thousands of random configurations — tier sizes from
// one sequence's worth upward (and, one in five, a device tier below the longest sequence:
// long sequences, docs/LONG_CONTEXT.md), block sizes, preemption modes, priorities, staggered adds
// and cancels, some from a client thread, a second context on the same disk file, budgets
// beyond the machine — asserting that every sequence finishes, the
// scheduler never schedules nothing while sequences wait (Engine::VerifyIntegrity), and
// every completed output equals the unlimited-memory run.
// Environment: KVTIER_LIVENESS_CONFIGS=N (default 2000; 400 under sanitizers),
// KVTIER_LIVENESS_SEED=S.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kv/tier_budgets.h"
#include "testing/fake_file_io.h"
#include "testing/sanitizers.h"
#include "testing/test_model.h"


namespace kvtier {
namespace {

using testing::OpenCheckpoint;
using testing::TinyLlamaDir;

std::shared_ptr<const Checkpoint> Model(uint64_t seed = 7) {
  static std::map<uint64_t, std::shared_ptr<const Checkpoint>> models;
  auto& model = models[seed];
  if (model == nullptr) model = OpenCheckpoint(TinyLlamaDir(seed));
  return model;
}

// Bytes of one KV block of the tiny Llama on the CPU backend with `block_tokens`.
int64_t BlockBytes(int64_t block_tokens) {
  static std::map<int64_t, int64_t> bytes;
  auto& b = bytes[block_tokens];
  if (b == 0) {
    EngineOptions o;
    o.backend = "cpu";
    o.block_tokens = block_tokens;
    o.gpu_kv_bytes = 1 << 20;  // only the layout is wanted
    auto e = Engine::Create(Model(), o);
    EXPECT_TRUE(e.ok()) << e.status();
    b = static_cast<int64_t>((*e)->backend().kv_layout().BlockBytes());
  }
  return b;
}

SamplingParams Params(int max_new, int32_t priority = 0) {
  SamplingParams p;
  p.max_new_tokens = max_new;
  p.priority = priority;
  return p;
}

// Steps until nothing is unfinished, checking the invariants (the progress guarantee
// included) after every step; fails after `max_steps`. Tokens per sequence id.
std::map<SequenceId, std::vector<int32_t>> StepToEnd(Engine& engine, int max_steps,
                                                     std::map<SequenceId, FinishReason>* finish = nullptr) {
  std::map<SequenceId, std::vector<int32_t>> out;
  std::vector<StepEvent> events;
  int step = 0;
  for (; step < max_steps && engine.NumUnfinished() > 0; ++step) {
    events.clear();
    const absl::Status status = engine.Step(&events);
    EXPECT_TRUE(status.ok()) << status;
    for (const StepEvent& e : events) {
      if (e.token) out[e.sequence].push_back(*e.token);
      if (finish != nullptr && e.finish != FinishReason::kNone) (*finish)[e.sequence] = e.finish;
    }
    const absl::Status integrity = engine.VerifyIntegrity();
    EXPECT_TRUE(integrity.ok()) << integrity << " at step " << step;
    if (!integrity.ok()) break;
  }
  EXPECT_EQ(engine.NumUnfinished(), 0) << "still unfinished after " << step << " steps: " << engine.Stats().dump();
  return out;
}

// The independent check's reproduction: tiny Llama seed 3, 13 device blocks of 4 tokens,
// 64 host blocks, four greedy requests added before the first step.
struct Request {
  std::vector<int32_t> prompt;
  int max_new;
};
const std::vector<Request>& StallRequests() {
  static const std::vector<Request> requests = {
      {{8, 222, 403, 301, 194}, 19},
      {{137, 259, 455, 446, 111, 329, 128}, 3},
      {{253, 486, 216, 218, 358, 312, 289, 450, 496, 446, 159, 255, 405, 238, 162}, 24},
      {{427, 248, 334, 401, 114, 430, 472, 86, 188, 226, 414, 373}, 7},
  };
  return requests;
}

std::vector<std::vector<int32_t>> RunRequests(const EngineOptions& options, const std::vector<Request>& requests,
                                              uint64_t model_seed) {
  auto engine = Engine::Create(Model(model_seed), options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  std::vector<SequenceId> ids;
  for (const Request& r : requests) ids.push_back(*(*engine)->Add(r.prompt, Params(r.max_new)));
  auto out = StepToEnd(**engine, 2000);
  std::vector<std::vector<int32_t>> tokens;
  for (SequenceId id : ids) tokens.push_back(out[id]);
  return tokens;
}

EngineOptions StallOptions(PreemptionMode mode) {
  EngineOptions o;
  o.backend = "cpu";
  o.num_threads = 1;
  o.block_tokens = 4;
  o.gpu_kv_bytes = 26624;
  o.host_kv_bytes = 131072;
  o.max_running = 16;
  o.preemption = mode;
  return o;
}

TEST(LivenessTest, SwapPreemptionNeverStopsTheScheduler) {
  ASSERT_EQ(BlockBytes(4) * 13, 26624) << "the reproduction assumes 13 device blocks";
  EngineOptions unlimited = StallOptions(PreemptionMode::kRecompute);
  unlimited.gpu_kv_bytes = 4096 * BlockBytes(4);
  const auto expected = RunRequests(unlimited, StallRequests(), 3);
  for (PreemptionMode mode : {PreemptionMode::kAuto, PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    SCOPED_TRACE(static_cast<int>(mode));
    EXPECT_EQ(RunRequests(StallOptions(mode), StallRequests(), 3), expected);
  }
}

// Priorities 0-2 and a request added after the first step, on a device tier barely larger
// than the longest sequence.
TEST(LivenessTest, PrioritiesAndLateArrivalsUnderSwapAllFinish) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 5 + 3 * i; ++t) p.push_back(static_cast<int32_t>(3 + rng() % 500));
    prompts.push_back(p);
  }
  const int max_new = 12;
  auto run = [&](int64_t device_blocks, PreemptionMode mode) {
    EngineOptions o = StallOptions(mode);
    o.gpu_kv_bytes = device_blocks * BlockBytes(4);
    auto engine = *Engine::Create(Model(3), o);
    std::map<int, SequenceId> ids;
    for (int i = 0; i < 5; ++i) ids[i] = *engine->Add(prompts[i], Params(max_new, i % 3));
    std::vector<StepEvent> events;
    std::map<SequenceId, std::vector<int32_t>> out;
    EXPECT_TRUE(engine->Step(&events).ok());
    for (const StepEvent& e : events) out[e.sequence].push_back(*e.token);
    ids[5] = *engine->Add(prompts[5], Params(max_new, 2));
    for (auto& [id, tokens] : StepToEnd(*engine, 2000)) out[id].insert(out[id].end(), tokens.begin(), tokens.end());
    std::vector<std::vector<int32_t>> result;
    for (auto& [i, id] : ids) result.push_back(out[id]);
    return result;
  };
  const auto expected = run(4096, PreemptionMode::kRecompute);
  const int64_t longest = (5 + 3 * 5 + max_new + 3) / 4;
  for (PreemptionMode mode : {PreemptionMode::kAuto, PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    for (int64_t blocks : {longest, longest + 1, longest + 3}) {
      SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " blocks " << blocks);
      EXPECT_EQ(run(blocks, mode), expected);
    }
  }
}

// A device tier exactly as large as the one sequence: it runs even though the watermark
// (blocks kept free while admitting) would not leave it room.
TEST(LivenessTest, SequenceFillingTheWholeDeviceTierRuns) {
  EngineOptions o = StallOptions(PreemptionMode::kSwap);
  o.gpu_kv_bytes = 8 * BlockBytes(4);
  o.watermark_blocks = 1;
  auto engine = *Engine::Create(Model(3), o);
  std::vector<int32_t> prompt(31, 7);
  SamplingParams params = Params(1);
  params.ignore_eos = true;
  ASSERT_TRUE(engine->Add(prompt, params).ok());  // 32 tokens: its prefill takes all 8 blocks
  auto out = StepToEnd(*engine, 200);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.begin()->second.size(), 1u);
}

// Without long sequences (a backend that cannot read KV from the host tier), a sequence
// admitted before another pinned most of the device tier can never run: it finishes with an
// error instead of waiting forever.
TEST(LivenessTest, SequenceThePinsLeaveNoRoomForFailsInsteadOfWaiting) {
  EngineOptions o = StallOptions(PreemptionMode::kRecompute);
  o.gpu_kv_bytes = 8 * BlockBytes(4);
  o.watermark_blocks = 0;
  o.max_long_running = 0;
  auto engine = *Engine::Create(Model(3), o);
  SamplingParams pin = Params(1);
  pin.pin_prefix = true;
  ASSERT_TRUE(engine->Add(std::vector<int32_t>(24, 5), pin).ok());   // pins 6 blocks
  auto big = engine->Add(std::vector<int32_t>(20, 9), Params(8));     // 7 blocks
  ASSERT_TRUE(big.ok());
  std::map<SequenceId, FinishReason> finish;
  StepToEnd(*engine, 200, &finish);
  EXPECT_EQ(finish[*big], FinishReason::kError);
  std::string error;
  ASSERT_TRUE(engine->ReadSequence(*big, [&](const Sequence& s) { error = s.error; }).ok());
  EXPECT_NE(error.find("pinned"), std::string::npos) << error;
}

// With long sequences, the same sequence runs beside the pins, its older blocks on the
// host tier, and produces the tokens of an unlimited device tier.
TEST(LivenessTest, SequenceThePinsLeaveLittleRoomForRunsAsALongSequence) {
  const std::vector<int32_t> pinned_prompt(24, 5);
  const std::vector<int32_t> big_prompt(20, 9);
  SamplingParams params = Params(8);
  params.ignore_eos = true;
  EngineOptions unlimited = StallOptions(PreemptionMode::kRecompute);
  unlimited.gpu_kv_bytes = 4096 * BlockBytes(4);
  auto reference = *Engine::Create(Model(3), unlimited);
  const SequenceId reference_id = *reference->Add(big_prompt, params);
  const std::vector<int32_t> expected = StepToEnd(*reference, 200)[reference_id];
  ASSERT_EQ(expected.size(), 8u);

  EngineOptions o = StallOptions(PreemptionMode::kRecompute);
  o.gpu_kv_bytes = 8 * BlockBytes(4);
  o.watermark_blocks = 0;
  auto engine = *Engine::Create(Model(3), o);
  SamplingParams pin = Params(1);
  pin.pin_prefix = true;
  ASSERT_TRUE(engine->Add(pinned_prompt, pin).ok());  // pins 6 blocks
  auto big = engine->Add(big_prompt, params);         // 7 blocks; 2 left on the device
  ASSERT_TRUE(big.ok());
  std::map<SequenceId, FinishReason> finish;
  auto out = StepToEnd(*engine, 200, &finish);
  EXPECT_EQ(finish[*big], FinishReason::kLength);
  EXPECT_EQ(out[*big], expected);
  EXPECT_GT(engine->Stats()["blocks_moved_to_host"].get<int64_t>(), 0);
}

// ---------------------------------------------------------------- two contexts, one file

EngineOptions DiskOptions(const std::string& path, FileIo* io) {
  EngineOptions o;
  o.backend = "cpu";
  o.num_threads = 1;
  o.block_tokens = 8;
  o.gpu_kv_bytes = 16 * BlockBytes(8);
  o.disk_kv_bytes = 128 * BlockBytes(8);
  o.disk_path = path;
  o.file_io = io;
  o.preemption = PreemptionMode::kSwap;
  // Every block found on disk is loaded (the tests count disk hits); the load-or-recompute
  // split may compute a short prefix when the disk measures slow, and has tests of its own.
  o.load_or_recompute = false;
  return o;
}

TEST(LivenessTest, SecondContextOnOneDiskFileIsRefusedNotCorrupted) {
  const std::string path = testing::TestTempDir() + "/shared.kv";
  auto first = Engine::Create(Model(), DiskOptions(path, nullptr));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Engine::Create(Model(), DiskOptions(path, nullptr));
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_NE(second.status().message().find(path), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find("disk_path"), std::string::npos) << second.status();
  // Once the first is freed the file is free again, with what the first cached in it.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(10 + i);
  ASSERT_TRUE((*first)->Add(prompt, Params(4)).ok());
  StepToEnd(**first, 200);
  first->reset();
  auto reopened = Engine::Create(Model(), DiskOptions(path, nullptr));
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  ASSERT_TRUE((*reopened)->Add(prompt, Params(4)).ok());
  StepToEnd(**reopened, 200);
  EXPECT_GT((*reopened)->Stats()["prefix_hits"]["disk"].get<int64_t>(), 0);
}

// The same through FakeFileIo (what the soak and property tests use).
TEST(LivenessTest, FakeFileIoLocksLikeThePosixOne) {
  FakeFileIo io;
  auto first = Engine::Create(Model(), DiskOptions("/kv.bin", &io));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(absl::IsUnavailable(Engine::Create(Model(), DiskOptions("/kv.bin", &io)).status()));
  first->reset();
  EXPECT_TRUE(Engine::Create(Model(), DiskOptions("/kv.bin", &io)).ok());
}

// Another process holding the file: refused here until it exits; then the file serves
// this process, and outputs stay exact.
TEST(LivenessTest, SecondProcessOnOneDiskFileIsRefusedUntilTheFirstExits) {
#ifdef KVTIER_TEST_THREAD_SANITIZER
  GTEST_SKIP() << "fork() is not supported under ThreadSanitizer; the normal and ASan builds run this";
#endif
  const std::string path = testing::TestTempDir() + "/two-process.kv";
  int ready[2];
  int release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(100 + i);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child: hold a context on the file, generate, then wait to be released.
    auto engine = Engine::Create(Model(), DiskOptions(path, nullptr));
    char byte = engine.ok() ? 1 : 0;
    if (engine.ok() && (*engine)->Add(prompt, Params(4)).ok()) {
      std::vector<StepEvent> events;
      while ((*engine)->NumUnfinished() > 0 && (*engine)->Step(&events).ok()) {}
    }
    if (write(ready[1], &byte, 1) != 1) _exit(2);
    if (read(release[0], &byte, 1) != 1) _exit(3);
    if (engine.ok()) engine->reset();  // persists the cache, releases the file
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 1) << "the child could not create its context";
  auto refused = Engine::Create(Model(), DiskOptions(path, nullptr));
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  ASSERT_EQ(write(release[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EngineOptions unlimited = DiskOptions("", nullptr);
  unlimited.disk_kv_bytes = 0;
  const auto expected = RunRequests(unlimited, {{prompt, 4}}, 7);
  auto engine = Engine::Create(Model(), DiskOptions(path, nullptr));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const SequenceId id = *(*engine)->Add(prompt, Params(4));
  auto out = StepToEnd(**engine, 200);
  EXPECT_EQ(out[id], expected[0]);
  EXPECT_GT((*engine)->Stats()["prefix_hits"]["disk"].get<int64_t>(), 0);
}

// ---------------------------------------------------------------- budgets

int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGE_SIZE);
}

// Budgets the machine cannot hold are refused before anything is allocated: at once, and
// without the memory growth proportional to the budget.
TEST(LivenessTest, BudgetsBeyondTheMachineAreRefusedAtOnce) {
  const int64_t physical = PhysicalMemoryBytes();
  ASSERT_GT(physical, 0);
  const std::string path = testing::TestTempDir() + "/huge.kv";
  struct Case {
    int64_t host;
    int64_t disk;
    const char* names;
  };
  for (const Case& c : {Case{int64_t{1} << 40, 0, "host_kv_bytes"}, Case{int64_t{64} << 40, 0, "host_kv_bytes"},
                        Case{0, int64_t{1} << 50, "disk"}, Case{0, int64_t{64} << 50, "disk"}}) {
    if (c.host > 0 && c.host <= physical) continue;  // a machine with over a TiB of memory
    EngineOptions o;
    o.backend = "cpu";
    o.host_kv_bytes = c.host;
    o.disk_kv_bytes = c.disk;
    o.disk_path = c.disk > 0 ? path : "";
    const int64_t resident_before = ResidentBytes();
    const auto start = std::chrono::steady_clock::now();
    auto engine = Engine::Create(Model(), o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(ResidentBytes() - resident_before, int64_t{4} << 20) << "resident memory grew refusing " << c.names;
    ASSERT_FALSE(engine.ok());
    EXPECT_TRUE(absl::IsResourceExhausted(engine.status())) << engine.status();
    EXPECT_NE(engine.status().message().find(c.names), std::string::npos) << engine.status();
    EXPECT_LT(seconds, 0.1) << engine.status();
    EXPECT_FALSE(std::filesystem::exists(path)) << "a refused disk tier left its file";
  }
}

// ---------------------------------------------------------------- property test

// A pool of prompts, a third of them over shared prefixes (prefix reuse), and their tokens
// in an unlimited run, per block size (outputs do not depend on it, but keep it honest).
constexpr int kPoolSize = 24;
constexpr int kMaxNew = 12;
const std::vector<std::vector<int32_t>>& PromptPool() {
  static const std::vector<std::vector<int32_t>> pool = [] {
    std::mt19937 rng(2024);
    std::vector<int32_t> shared_a, shared_b;
    for (int i = 0; i < 9; ++i) shared_a.push_back(static_cast<int32_t>(3 + rng() % 500));
    for (int i = 0; i < 16; ++i) shared_b.push_back(static_cast<int32_t>(3 + rng() % 500));
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < kPoolSize; ++i) {
      std::vector<int32_t> p = i % 3 == 0 ? shared_a : i % 3 == 1 ? shared_b : std::vector<int32_t>{};
      const int own = 1 + static_cast<int>(rng() % 14);
      for (int t = 0; t < own; ++t) p.push_back(static_cast<int32_t>(3 + rng() % 500));
      prompts.push_back(p);
    }
    return prompts;
  }();
  return pool;
}

const std::vector<int32_t>& PoolReference(int index) {
  static const std::vector<std::vector<int32_t>> reference = [] {
    EngineOptions o;
    o.backend = "cpu";
    o.num_threads = 1;
    o.block_tokens = 4;
    o.gpu_kv_bytes = 4096 * BlockBytes(4);
    auto engine = *Engine::Create(Model(), o);
    std::vector<SequenceId> ids;
    for (const auto& p : PromptPool()) {
      SamplingParams params = Params(kMaxNew);
      params.ignore_eos = true;
      ids.push_back(*engine->Add(p, params));
    }
    auto out = StepToEnd(*engine, 5000);
    std::vector<std::vector<int32_t>> tokens;
    for (SequenceId id : ids) tokens.push_back(out[id]);
    return tokens;
  }();
  return reference[static_cast<size_t>(index)];
}

struct Config {
  int64_t block_tokens;
  int64_t device_blocks, host_blocks, disk_blocks;
  PreemptionMode mode;
  int64_t max_running, max_tokens_per_step, watermark;
  bool prefix_cache;
  bool priorities;
  bool client_thread;
  bool oversized_budget;  // a budget beyond the machine is tried (and refused) first
  int num_sequences;
  bool long_sequences;  // a device tier below the longest sequence (docs/LONG_CONTEXT.md)
  std::string Describe() const {
    return absl::StrCat("block_tokens ", block_tokens, ", blocks ", device_blocks, "/", host_blocks, "/", disk_blocks,
                        ", mode ", static_cast<int>(mode), ", max_running ", max_running, ", step ",
                        max_tokens_per_step, ", watermark ", watermark, ", prefix_cache ", prefix_cache,
                        ", priorities ", priorities, ", thread ", client_thread, ", oversized ", oversized_budget, ", sequences ", num_sequences,
                        ", long ", long_sequences);
  }
};

Config RandomConfig(std::mt19937& rng) {
  Config c;
  static const int64_t kBlockTokens[] = {1, 2, 4, 8, 16};
  c.block_tokens = kBlockTokens[rng() % 5];
  int64_t longest = 0;
  for (const auto& p : PromptPool()) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()) + kMaxNew);
  const int64_t one_sequence = (longest + c.block_tokens - 1) / c.block_tokens;
  // From exactly one sequence's worth up to about four.
  const int64_t extra = static_cast<int64_t>(rng() % (3 * one_sequence + 1));
  c.device_blocks = one_sequence + (rng() % 2 == 0 ? 0 : extra);
  c.host_blocks = rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % (4 * one_sequence + 1));
  c.disk_blocks = rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % (8 * one_sequence + 1));
  static const PreemptionMode kModes[] = {PreemptionMode::kAuto, PreemptionMode::kSwap, PreemptionMode::kRecompute};
  c.mode = kModes[rng() % 3];
  c.max_running = 1 + static_cast<int64_t>(rng() % 12);
  c.max_tokens_per_step = rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % 8) : 8 + static_cast<int64_t>(rng() % 120);
  c.watermark = static_cast<int64_t>(rng() % 3);
  c.prefix_cache = rng() % 5 != 0;
  c.priorities = rng() % 2 == 0;
  c.client_thread = rng() % 8 == 0;
  c.oversized_budget = rng() % 16 == 0;
  c.num_sequences = 1 + static_cast<int>(rng() % 8);
  // One in five: a device tier smaller than the longest sequence over a host tier that
  // holds it, so the longer sequences run with their older blocks on the host tier.
  c.long_sequences = one_sequence > 1 && rng() % 5 == 0;
  if (c.long_sequences) {
    c.device_blocks = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(one_sequence - 1));
    c.host_blocks = std::max(c.host_blocks, one_sequence);
  }
  return c;
}

// One configuration: its sequences added (some before the first step, the rest at random
// steps, from the stepping thread or a client thread) and some cancelled; every sequence
// must finish, completed ones exactly as in the unlimited run, cancelled ones a prefix of it.
// Adds the blocks long sequences moved to the host tier to *moved_to_host.
void RunConfig(const Config& c, uint32_t seed, int64_t* moved_to_host) {
  SCOPED_TRACE(c.Describe() + absl::StrCat(", seed ", seed));
  FakeFileIo io;
  EngineOptions o;
  o.backend = "cpu";
  o.num_threads = 1;
  o.block_tokens = c.block_tokens;
  const int64_t block_bytes = BlockBytes(c.block_tokens);
  o.gpu_kv_bytes = c.device_blocks * block_bytes;
  o.host_kv_bytes = c.host_blocks * block_bytes;
  o.disk_kv_bytes = c.disk_blocks * block_bytes;
  o.disk_path = c.disk_blocks > 0 ? "/kv.bin" : "";
  o.file_io = &io;
  o.preemption = c.mode;
  o.max_running = c.max_running;
  o.max_tokens_per_step = c.max_tokens_per_step;
  o.watermark_blocks = c.watermark;
  o.prefix_cache = c.prefix_cache;
  if (c.oversized_budget) {
    // First a budget the machine cannot hold: refused at once, nothing allocated for it.
    EngineOptions huge = o;
    if (c.disk_blocks > 0) {
      io.set_capacity_bytes(int64_t{1} << 30);
      huge.disk_kv_bytes = int64_t{3} << 30;
    } else {
      huge.host_kv_bytes = 2 * PhysicalMemoryBytes();
    }
    const auto start = std::chrono::steady_clock::now();
    const absl::Status refused = Engine::Create(Model(), huge).status();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.1);
    ASSERT_TRUE(absl::IsResourceExhausted(refused)) << refused;
    EXPECT_EQ(io.used_bytes(), 0) << "a refused disk tier allocated its file";
    io.set_capacity_bytes(std::nullopt);
  }
  auto created = Engine::Create(Model(), o);
  ASSERT_TRUE(created.ok()) << created.status();
  Engine& engine = **created;
  if (c.disk_blocks > 0) {
    // A second context on the same file is refused (it used to share the slots).
    ASSERT_TRUE(absl::IsUnavailable(Engine::Create(Model(), o).status()));
  }

  std::mt19937 rng(seed);
  constexpr int kPlanSteps = 24;  // adds and cancels happen in the first steps
  struct Planned {
    int prompt;
    int max_new;
    int32_t priority;
    int add_at_step;     // -1: before the first step
    int cancel_at_step;  // -1: never
  };
  std::vector<Planned> plan;
  for (int i = 0; i < c.num_sequences; ++i) {
    Planned p;
    p.prompt = static_cast<int>(rng() % kPoolSize);
    p.max_new = 1 + static_cast<int>(rng() % kMaxNew);
    p.priority = c.priorities ? static_cast<int32_t>(rng() % 3) : 0;
    p.add_at_step = rng() % 2 == 0 ? -1 : static_cast<int>(rng() % 12);
    p.cancel_at_step = rng() % 6 == 0 ? static_cast<int>(rng() % 20) : -1;
    plan.push_back(p);
  }
  std::mutex mu;
  std::map<SequenceId, int> planned_of;  // id -> index in plan
  std::atomic<int> step{0};
  auto add = [&](int i) {
    SamplingParams params = Params(plan[i].max_new, plan[i].priority);
    params.ignore_eos = true;
    auto id = engine.Add(PromptPool()[static_cast<size_t>(plan[i].prompt)], params);
    ASSERT_TRUE(id.ok()) << id.status();
    std::lock_guard<std::mutex> lock(mu);
    planned_of[*id] = i;
  };
  auto act = [&](int at_step) {  // the adds and cancels planned for this step
    for (int i = 0; i < c.num_sequences; ++i) {
      if (plan[i].add_at_step == at_step) add(i);
    }
    std::vector<SequenceId> cancels;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& [id, i] : planned_of) {
        if (plan[i].cancel_at_step == at_step) cancels.push_back(id);
      }
    }
    for (SequenceId id : cancels) engine.Cancel(id).IgnoreError();  // may have finished
  };
  for (int i = 0; i < c.num_sequences; ++i) {
    if (plan[i].add_at_step == -1) add(i);
  }
  // The client thread acts for step s while the stepping thread runs step s (or s + 1):
  // never further behind, so that its adds and cancels land among the steps.
  std::atomic<bool> client_done{!c.client_thread};
  std::atomic<int> acted{0};  // steps the client has acted for
  std::thread client;
  if (c.client_thread) {
    client = std::thread([&] {
      for (int s = 0; s < kPlanSteps; ++s) {
        while (step.load() < s) std::this_thread::yield();
        act(s);
        acted = s + 1;
      }
      client_done = true;
    });
  }
  // Joined on every way out, failed assertions included.
  struct Joiner {
    std::thread& thread;
    std::atomic<int>& step;
    ~Joiner() {
      if (!thread.joinable()) return;
      step = 1 << 20;
      thread.join();
    }
  } joiner{client, step};
  std::map<SequenceId, std::vector<int32_t>> out;
  std::map<SequenceId, FinishReason> finish;
  std::vector<StepEvent> events;
  constexpr int kMaxSteps = 4000;
  for (int s = 0; s < kMaxSteps; ++s) {
    if (!c.client_thread && s < kPlanSteps) act(s);
    while (c.client_thread && s < kPlanSteps && acted.load() < s) std::this_thread::yield();
    if (s >= kPlanSteps && client_done && engine.NumUnfinished() == 0) break;
    events.clear();
    const absl::Status stepped = engine.Step(&events);
    ASSERT_TRUE(stepped.ok()) << stepped;
    for (const StepEvent& e : events) {
      if (e.token) out[e.sequence].push_back(*e.token);
      if (e.finish != FinishReason::kNone) finish[e.sequence] = e.finish;
    }
    step = s + 1;
    const absl::Status integrity = engine.VerifyIntegrity();
    ASSERT_TRUE(integrity.ok()) << integrity << " at step " << s << "\n" << engine.Stats().dump();
  }
  if (client.joinable()) {
    step = 1 << 20;
    client.join();
  }
  ASSERT_EQ(engine.NumUnfinished(), 0) << "did not finish in " << kMaxSteps << " steps\n" << engine.Stats().dump();
  ASSERT_EQ(static_cast<int>(planned_of.size()), c.num_sequences);
  for (const auto& [id, i] : planned_of) {
    const std::vector<int32_t>& reference = PoolReference(plan[i].prompt);
    const std::vector<int32_t> expected(reference.begin(), reference.begin() + plan[i].max_new);
    const std::vector<int32_t>& got = out[id];
    ASSERT_TRUE(finish.contains(id)) << "sequence " << id << " never reported its end";
    if (finish[id] == FinishReason::kCancelled) {
      ASSERT_LE(got.size(), expected.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin())) << "cancelled sequence " << id;
    } else {
      EXPECT_EQ(finish[id], FinishReason::kLength) << "sequence " << id;
      EXPECT_EQ(got, expected) << "sequence " << id << " (prompt " << plan[i].prompt << ")";
    }
  }
  // Nothing held on any tier once the disk jobs of released sequences have landed (an
  // empty step lands what has finished).
  auto used = [&] {
    const nlohmann::json stats = engine.Stats();
    int64_t blocks = 0;
    for (const char* tier : {"gpu", "host", "disk"}) blocks += stats["tiers"][tier]["used_blocks"].get<int64_t>();
    return blocks;
  };
  for (int i = 0; i < 200 && used() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    events.clear();
    ASSERT_TRUE(engine.Step(&events).ok());
  }
  EXPECT_EQ(used(), 0) << engine.Stats().dump();
  *moved_to_host += engine.Stats()["blocks_moved_to_host"].get<int64_t>();
}

int NumConfigs() {
  if (const char* env = std::getenv("KVTIER_LIVENESS_CONFIGS")) return std::atoi(env);
  return testing::kSanitized ? 400 : 2000;
}

TEST(LivenessTest, RandomConfigurationsAllFinishExactly) {
  const char* seed_env = std::getenv("KVTIER_LIVENESS_SEED");
  const uint32_t seed = seed_env != nullptr ? static_cast<uint32_t>(std::atoi(seed_env)) : 20261201u;
  std::mt19937 rng(seed);
  for (int i = 0; i < kPoolSize; ++i) PoolReference(i);  // outside the timing of the configs
  const int n = NumConfigs();
  const auto start = std::chrono::steady_clock::now();
  int64_t moved_to_host = 0;
  for (int i = 0; i < n; ++i) {
    const Config c = RandomConfig(rng);
    const uint32_t config_seed = static_cast<uint32_t>(rng());
    ASSERT_NO_FATAL_FAILURE(RunConfig(c, config_seed, &moved_to_host)) << "configuration " << i;
    if (::testing::Test::HasFailure()) break;
  }
  std::printf("%d configurations in %.1f s; long sequences moved %lld blocks to the host tier\n", n,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              static_cast<long long>(moved_to_host));
  // The long-sequence configurations did run some sequence partly from the host tier.
  if (n >= 50) {
    EXPECT_GT(moved_to_host, 0);
  }
}

}  // namespace
}  // namespace kvtier
