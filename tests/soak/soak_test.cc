// Soak: sequences added and cancelled at random from several client threads while one thread
// steps, under KV budgets small enough to force swaps to host and disk and recomputes, with
// disk faults injected through FakeFileIo (full disk, EIO on write/read/sync, short and torn
// writes, bit flips in slots, a truncated index file between rounds).
// Pass: no crash; every completed sequence identical to its solo run (a cancelled one's
// tokens a prefix of it); the KV manager's invariants after every step; no block in use on
// any tier once drained; statistics adding up; resident memory flat after warm-up.
// Environment: KVTIER_SOAK_SEQUENCES=N (default 10000; 2000 under ASan or TSan),
// KVTIER_SOAK_LONG=1 (200000 sequences), KVTIER_SOAK_SEED=S.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/fake_file_io.h"
#include "testing/sanitizers.h"
#include "testing/test_model.h"


#ifdef KVTIER_TEST_ADDRESS_SANITIZER
// A small quarantine so that resident memory reflects the program, not ASan's delay of
// frees (ASAN_OPTIONS in the environment still wins).
extern "C" const char* __asan_default_options() { return "quarantine_size_mb=16"; }
#endif

namespace kvtier {
namespace {

using testing::OpenCheckpoint;
using testing::TinyLlamaDir;

constexpr int64_t kBlockTokens = 4;
constexpr int kNumPrompts = 64;
constexpr int kClientThreads = 3;
const char kDiskPath[] = "/soak/kv.bin";

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::atoll(v) : fallback;
}

int64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long size = 0, resident = 0;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

struct PromptSpec {
  std::vector<int32_t> tokens;
  int max_new = 0;
};

// 64 distinct prompts: lengths 2..24, half sharing a 2-block prefix (prefix cache traffic).
std::vector<PromptSpec> MakePrompts() {
  std::mt19937 rng(1234);
  std::vector<int32_t> shared;
  for (int i = 0; i < 2 * kBlockTokens; ++i) shared.push_back(static_cast<int32_t>(3 + rng() % 500));
  std::vector<PromptSpec> prompts;
  for (int p = 0; p < kNumPrompts; ++p) {
    PromptSpec spec;
    if (p % 2 == 0) spec.tokens = shared;
    const int len = 2 + static_cast<int>(rng() % 16);
    for (int i = 0; i < len; ++i) spec.tokens.push_back(static_cast<int32_t>(3 + rng() % 500));
    spec.tokens.push_back(static_cast<int32_t>(p));  // distinct
    spec.max_new = 2 + p % 7;
    prompts.push_back(std::move(spec));
  }
  return prompts;
}

SamplingParams Greedy(int n) {
  SamplingParams p;
  p.max_new_tokens = n;
  p.ignore_eos = true;
  return p;
}

EngineOptions BaseOptions(std::shared_ptr<const Checkpoint> checkpoint) {
  EngineOptions o;
  o.backend = "cpu";
  o.num_threads = 1;
  o.block_tokens = kBlockTokens;
  return o;
}

// Each prompt alone on an unlimited engine without prefix cache.
std::vector<std::vector<int32_t>> SoloOutputs(std::shared_ptr<const Checkpoint> checkpoint,
                                              const std::vector<PromptSpec>& prompts) {
  EngineOptions o = BaseOptions(checkpoint);
  o.gpu_kv_bytes = 16ll << 20;
  o.prefix_cache = false;
  auto engine = Engine::Create(checkpoint, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) {
    auto id = (*engine)->Add(p.tokens, Greedy(p.max_new));
    EXPECT_TRUE(id.ok()) << id.status();
    std::vector<int32_t> tokens;
    std::vector<StepEvent> events;
    while ((*engine)->NumUnfinished() > 0) {
      events.clear();
      EXPECT_TRUE((*engine)->Step(&events).ok());
      for (const auto& e : events) {
        if (e.token) tokens.push_back(*e.token);
      }
    }
    EXPECT_EQ(static_cast<int>(tokens.size()), p.max_new);
    out.push_back(std::move(tokens));
  }
  return out;
}

struct Totals {
  int64_t added = 0, busy = 0, cancel_calls = 0, cancelled = 0, completed = 0, failed = 0;
  int64_t steps = 0, mismatches = 0, verify_failures = 0;
  int64_t armed[8] = {};  // by FaultKind
};

enum FaultKind { kEioWrite, kShortWrite, kTornWrite, kEioRead, kEioSync, kBitFlip, kDiskFull, kIndexTruncated };
const char* const kFaultNames[] = {"eio_write", "short_write", "torn_write", "eio_read",
                                   "eio_sync", "bit_flip", "disk_full", "index_truncated"};

TEST(SoakTest, AddCancelStepUnderFaults) {
  const bool long_mode = EnvInt("KVTIER_SOAK_LONG", 0) != 0;
#if defined(KVTIER_TEST_THREAD_SANITIZER)
  const int64_t default_sequences = 2000;
#elif defined(KVTIER_TEST_ADDRESS_SANITIZER)
  const int64_t default_sequences = 2000;  // Debug + ASan: about 10x slower per step
#else
  const int64_t default_sequences = 10000;
#endif
  const int64_t total_sequences = EnvInt("KVTIER_SOAK_SEQUENCES", long_mode ? 200000 : default_sequences);
  const uint32_t seed = static_cast<uint32_t>(EnvInt("KVTIER_SOAK_SEED", 1));
  const auto started = std::chrono::steady_clock::now();

  auto checkpoint = OpenCheckpoint(TinyLlamaDir());
  const std::vector<PromptSpec> prompts = MakePrompts();
  const std::vector<std::vector<int32_t>> solo = SoloOutputs(checkpoint, prompts);
  ASSERT_EQ(solo.size(), prompts.size());

  int64_t block_bytes = 0;
  {
    EngineOptions o = BaseOptions(checkpoint);
    auto e = Engine::Create(checkpoint, o);
    ASSERT_TRUE(e.ok());
    block_bytes = static_cast<int64_t>((*e)->backend().kv_layout().BlockBytes());
  }

  FakeFileIo io;
  Totals totals;
  std::mt19937 step_rng(seed);
  // Rounds: a fresh context each (the disk file and its index carry over, as after a
  // restart), cycling through the preemption modes.
  const PreemptionMode modes[] = {PreemptionMode::kAuto, PreemptionMode::kSwap, PreemptionMode::kRecompute};
  const int64_t rounds = long_mode ? 20 : 4;
  int64_t rss_warm = 0, rss_end = 0, rss_peak = 0;
  int64_t added_overall = 0;
  nlohmann::json last_stats;
  int64_t stat_preemptions = 0, stat_recomputes = 0, stat_swaps_out = 0, stat_disk_peak = 0;
  int64_t stat_io_errors = 0, stat_corrupt = 0, stat_prefix_hits_disk = 0;

  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t round_sequences = total_sequences / rounds + (round < total_sequences % rounds ? 1 : 0);
    EngineOptions o = BaseOptions(checkpoint);
    o.gpu_kv_bytes = 14 * block_bytes;
    o.host_kv_bytes = 6 * block_bytes;
    o.disk_kv_bytes = 48 * block_bytes;
    o.disk_path = kDiskPath;
    o.file_io = &io;
    o.max_tokens_per_step = 24;
    o.max_running = 8;
    o.max_waiting = 32;
    o.preemption = modes[round % 3];
    const int64_t cancelled_before = totals.cancelled, failed_before = totals.failed;
    auto created = Engine::Create(checkpoint, o);
    ASSERT_TRUE(created.ok()) << created.status();
    Engine& engine = **created;

    std::mutex mu;  // guards the maps below
    absl::flat_hash_map<SequenceId, int> prompt_of;  // added, outcome not yet checked
    struct Outcome {
      std::vector<int32_t> tokens;
      FinishReason finish;
    };
    absl::flat_hash_map<SequenceId, Outcome> unmatched;  // finished before prompt_of had it
    std::atomic<int64_t> added{0}, busy{0}, cancel_calls{0};
    std::atomic<bool> adding_done{false};
    std::atomic<int> clients_left{kClientThreads};

    auto check = [&](SequenceId id, int p, const Outcome& out) {  // mu held
      const auto& want = solo[static_cast<size_t>(p)];
      if (out.finish == FinishReason::kCancelled) {
        ++totals.cancelled;
        const bool prefix = out.tokens.size() <= want.size() &&
                            std::equal(out.tokens.begin(), out.tokens.end(), want.begin());
        if (!prefix) ++totals.mismatches;
        EXPECT_TRUE(prefix) << "cancelled sequence " << id << " (prompt " << p << ") diverged";
      } else if (out.finish == FinishReason::kError) {
        ++totals.failed;
      } else {
        ++totals.completed;
        if (out.tokens != want) ++totals.mismatches;
        EXPECT_EQ(out.tokens, want) << "sequence " << id << " (prompt " << p << ")";
      }
    };

    std::vector<std::thread> clients;
    for (int c = 0; c < kClientThreads; ++c) {
      const int64_t quota = round_sequences / kClientThreads + (c < round_sequences % kClientThreads ? 1 : 0);
      clients.emplace_back([&, c, quota] {
        std::mt19937 rng(seed * 1000 + static_cast<uint32_t>(round * 10 + c));
        std::vector<SequenceId> mine;
        for (int64_t n = 0; n < quota;) {
          const int p = static_cast<int>(rng() % kNumPrompts);
          auto id = engine.Add(prompts[p].tokens, Greedy(prompts[p].max_new));
          if (!id.ok()) {
            if (id.status().code() != absl::StatusCode::kUnavailable) {
              ADD_FAILURE() << id.status();
              break;
            }
            ++busy;
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            continue;
          }
          ++n;
          ++added;
          {
            std::lock_guard<std::mutex> lock(mu);
            auto it = unmatched.find(*id);
            if (it != unmatched.end()) {
              check(*id, p, it->second);
              unmatched.erase(it);
            } else {
              prompt_of[*id] = p;
            }
          }
          mine.push_back(*id);
          if (mine.size() > 64) mine.erase(mine.begin(), mine.begin() + 32);
          // About a third of the sequences get a cancel, at a random later moment.
          if (rng() % 3 == 0 && !mine.empty()) {
            const SequenceId victim = mine[rng() % mine.size()];
            absl::Status s = engine.Cancel(victim);
            ++cancel_calls;
            const auto code = s.code();
            EXPECT_TRUE(s.ok() || code == absl::StatusCode::kNotFound ||
                        code == absl::StatusCode::kFailedPrecondition) << s;
          }
          if (rng() % 8 == 0) {
            (void)engine.ReadSequence(mine.back(), [](const Sequence& s) { (void)s.num_generated(); });
          }
          if (rng() % 16 == 0) std::this_thread::yield();
        }
        if (--clients_left == 0) adding_done = true;
      });
    }

    // The stepping thread (this one): steps, injects faults, records outcomes.
    absl::flat_hash_map<SequenceId, std::vector<int32_t>> running_tokens;
    std::vector<StepEvent> events;
    int disk_full_steps = 0;
    while (!adding_done.load() || engine.NumUnfinished() > 0) {
      // Faults: about one in 24 steps arms one.
      const uint32_t r = step_rng() % 192;
      switch (r) {
        case 0: io.FailNextWrites(1); ++totals.armed[kEioWrite]; break;
        case 1: io.ShortWriteNext(step_rng() % 4096); ++totals.armed[kShortWrite]; break;
        case 2: io.TornWriteNext(step_rng() % 4096); ++totals.armed[kTornWrite]; break;
        case 3: io.FailNextReads(1); ++totals.armed[kEioRead]; break;
        case 4: io.FailNextSyncs(1); ++totals.armed[kEioSync]; break;
        case 5:
        case 6: {
          auto contents = io.Contents(kDiskPath);
          if (contents.ok() && !contents->empty()) {
            const int64_t offset = static_cast<int64_t>(step_rng() % contents->size());
            ASSERT_TRUE(io.FlipBit(kDiskPath, offset, static_cast<int>(step_rng() % 8)).ok());
            ++totals.armed[kBitFlip];
          }
          break;
        }
        case 7:
          if (disk_full_steps == 0) {
            io.set_capacity_bytes(0);  // below what is used: every write is ENOSPC
            disk_full_steps = 1 + static_cast<int>(step_rng() % 40);
            ++totals.armed[kDiskFull];
          }
          break;
        default: break;
      }
      if (disk_full_steps > 0 && --disk_full_steps == 0) io.set_capacity_bytes(std::nullopt);

      events.clear();
      absl::Status s = engine.Step(&events);
      ASSERT_TRUE(s.ok()) << s;
      ++totals.steps;
      for (const auto& e : events) {
        if (e.token) running_tokens[e.sequence].push_back(*e.token);
        if (e.finish == FinishReason::kNone) continue;
        Outcome out{std::move(running_tokens[e.sequence]), e.finish};
        running_tokens.erase(e.sequence);
        absl::Status released = engine.Release(e.sequence);
        EXPECT_TRUE(released.ok()) << released;
        std::lock_guard<std::mutex> lock(mu);
        auto it = prompt_of.find(e.sequence);
        if (it != prompt_of.end()) {
          check(e.sequence, it->second, out);
          prompt_of.erase(it);
        } else {
          unmatched.emplace(e.sequence, std::move(out));
        }
      }
      absl::Status integrity = engine.VerifyIntegrity();
      if (!integrity.ok()) ++totals.verify_failures;
      ASSERT_TRUE(integrity.ok()) << integrity << " round " << round << " step " << totals.steps;
      if (events.empty() && !adding_done.load()) std::this_thread::yield();

      const int64_t progress = added_overall + added.load();
      if (rss_warm == 0 && progress >= total_sequences / 5) rss_warm = ResidentBytes();
      if (totals.steps % 256 == 0) rss_peak = std::max(rss_peak, ResidentBytes());
    }
    for (auto& t : clients) t.join();
    io.set_capacity_bytes(std::nullopt);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(prompt_of.empty()) << prompt_of.size() << " sequences never finished";
      EXPECT_TRUE(unmatched.empty()) << unmatched.size() << " finished sequences never added";
    }
    added_overall += added.load();
    totals.added += added.load();
    totals.busy += busy.load();
    totals.cancel_calls += cancel_calls.load();

    // Drained: no block held by any sequence on any tier; counters add up.
    ASSERT_TRUE(engine.VerifyIntegrity().ok());
    nlohmann::json st = engine.Stats();
    for (const char* tier : {"gpu", "host", "disk"}) {
      EXPECT_EQ(st["tiers"][tier]["used_blocks"].get<int64_t>(), 0) << tier << ": " << st.dump();
    }
    EXPECT_EQ(st["sequences"]["unfinished"].get<int64_t>(), 0);
    // "finished" counts every end (completed, cancelled, failed).
    EXPECT_EQ(st["sequences"]["finished"].get<int64_t>(), added.load()) << st.dump();
    EXPECT_EQ(st["sequences"]["cancelled"].get<int64_t>(), totals.cancelled - cancelled_before) << st.dump();
    EXPECT_EQ(st["sequences"]["failed"].get<int64_t>(), totals.failed - failed_before) << st.dump();
    EXPECT_LE(st["tiers"]["gpu"]["peak_bytes"].get<int64_t>(), 14 * block_bytes);
    stat_preemptions += st["preemptions"].get<int64_t>();
    stat_recomputes += st["recomputes"].get<int64_t>();
    stat_swaps_out += st["swaps_out"].get<int64_t>();
    stat_disk_peak = std::max(stat_disk_peak, st["tiers"]["disk"]["peak_bytes"].get<int64_t>());
    stat_io_errors += st["io_errors"].get<int64_t>();
    stat_corrupt += st["corrupt_blocks_detected"].get<int64_t>();
    stat_prefix_hits_disk += st["prefix_hits"]["disk"].get<int64_t>();
    last_stats = st;
    created->reset();  // writes the disk index, as a shutdown does

    // Between rounds: sometimes truncate the index the next context will load.
    if (round % 2 == 0) {
      auto index = io.Contents(std::string(kDiskPath) + ".index");
      if (index.ok() && !index->empty()) {
        ASSERT_TRUE(io.Truncate(std::string(kDiskPath) + ".index",
                                static_cast<int64_t>(step_rng() % index->size())).ok());
        ++totals.armed[kIndexTruncated];
      }
    }
  }
  rss_end = ResidentBytes();
  rss_peak = std::max(rss_peak, rss_end);

  const FakeFileIo::FaultCounters f = io.fault_counters();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf(
      "soak: %lld sequences in %lld rounds, %.1f s; steps %lld; completed %lld, cancelled %lld, failed %lld; "
      "cancel calls %lld; busy retries %lld; mismatches %lld\n",
      (long long)totals.added, (long long)rounds, seconds, (long long)totals.steps, (long long)totals.completed,
      (long long)totals.cancelled, (long long)totals.failed, (long long)totals.cancel_calls,
      (long long)totals.busy, (long long)totals.mismatches);
  std::printf("soak: preemptions %lld, recomputes %lld, swaps_out %lld, disk peak bytes %lld, disk prefix hits %lld\n",
              (long long)stat_preemptions, (long long)stat_recomputes, (long long)stat_swaps_out,
              (long long)stat_disk_peak, (long long)stat_prefix_hits_disk);
  std::printf("soak: faults armed:");
  for (int k = 0; k < 8; ++k) std::printf(" %s=%lld", kFaultNames[k], (long long)totals.armed[k]);
  std::printf("\nsoak: faults injected (consumed): failed_writes=%lld short_writes=%lld torn_writes=%lld "
              "failed_reads=%lld failed_syncs=%lld no_space=%lld bit_flips=%lld truncations=%lld\n",
              (long long)f.failed_writes, (long long)f.short_writes, (long long)f.torn_writes,
              (long long)f.failed_reads, (long long)f.failed_syncs, (long long)f.no_space,
              (long long)f.bit_flips, (long long)f.truncations);
  std::printf("soak: faults detected: io_errors %lld, corrupt_blocks_detected %lld\n",
              (long long)stat_io_errors, (long long)stat_corrupt);
  std::printf("soak: RSS at 20%% %.1f MiB, at 100%% %.1f MiB, peak %.1f MiB\n", rss_warm / 1048576.0,
              rss_end / 1048576.0, rss_peak / 1048576.0);
  std::fflush(stdout);

  EXPECT_EQ(totals.added, total_sequences);
  EXPECT_EQ(totals.mismatches, 0);
  EXPECT_EQ(totals.completed + totals.cancelled + totals.failed, totals.added);
  EXPECT_GT(totals.completed, 0);
  EXPECT_GT(totals.cancelled, 0);
  if (total_sequences >= 1000) {
    EXPECT_GT(stat_preemptions, 0);
    EXPECT_GT(stat_swaps_out, 0);
    EXPECT_GT(stat_recomputes, 0);
    EXPECT_GT(stat_disk_peak, 0);
    EXPECT_GT(stat_io_errors + stat_corrupt, 0);
  }
  // Flat memory: at most 16 MiB + 10% growth from 20% to 100% of the sequences.
  EXPECT_LE(rss_end, rss_warm + rss_warm / 10 + (16ll << 20))
      << "RSS grew from " << rss_warm << " to " << rss_end;
}

}  // namespace
}  // namespace kvtier
