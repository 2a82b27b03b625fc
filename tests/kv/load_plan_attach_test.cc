// Load or recompute at the scheduler over a KV manager with host and disk tiers: a prompt
// whose blocks only the disk holds (after a restart) is split by the policy's costs — its
// front computed in the first chunk, which stops where the loaded back attaches; the next
// chunk starts after the loaded blocks, whose bytes are the ones stored. Costs at the two
// ends give "load all" and "compute all". A long sequence gets no plan.
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "kv/manager_fixture.h"
#include "kv/plan_steps.h"
#include "testing/fixed_cost_policy.h"

namespace kvtier {
namespace {

using testing::FixedCostPolicy;  // the test's cost model

constexpr int64_t kBlockTokens = 4;

// 10 full blocks + 1 token, or `length` tokens of the same series.
std::unique_ptr<Sequence> PromptSequence(SequenceId id, int length = 41) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < length; ++i) tokens.push_back(100 + i * 3);
  return std::make_unique<Sequence>(id, id, tokens, SamplingParams{});
}

std::pair<int64_t, int64_t> Chunk(int64_t start, int64_t length) { return {start, length}; }

Schedule NextOf(Scheduler& scheduler) {
  absl::StatusOr<Schedule> schedule = scheduler.Next();
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : Schedule{};
}

// Computes the prompt (of `length` tokens) on a first manager (blocks stamped with pattern
// 1 by index), caches it and restarts over the same disk: then only the disk holds its
// full blocks (10 for the default length).
void ComputeAndRestart(testing::ManagerFixture& f, int length = 41) {
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/false}, f.kv.get(), nullptr);
  auto seq = PromptSequence(1, length);
  scheduler.Enqueue(seq.get());
  Schedule s = NextOf(scheduler);
  ASSERT_EQ(s.chunks.size(), 1u);
  ASSERT_EQ(s.chunks[0].length, length);
  f.Stamp(1, 1);
  scheduler.Commit(s);
  scheduler.Remove(seq.get());
  f.Reopen();
  ASSERT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, (length - 1) / kBlockTokens);
}

// What loading one block is assumed to cost before any is measured.
double GuessedLoadSeconds(const testing::ManagerFixture& f) {
  return static_cast<double>(f.kv->block_bytes()) / DiskTier::kGuessedBytesPerSecond;
}

// The chunks a fresh copy of the prompt gets under `policy`: (start, length) of the first
// two.
// `land_loads`: the loads finish before the front does (the reader drained after the first
// step); otherwise the attach takes whatever has landed by then.
std::vector<std::pair<int64_t, int64_t>> RunPlanned(testing::ManagerFixture& f, PreemptionPolicy* policy,
                                                    Scheduler::LoadPlanCounters* plans, bool land_loads = true) {
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/true}, f.kv.get(), policy);
  auto seq = PromptSequence(2);
  scheduler.Enqueue(seq.get());
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int step = 0; step < 2; ++step) {
    Schedule s = NextOf(scheduler);
    EXPECT_EQ(s.chunks.size(), 1u);
    if (s.chunks.empty()) break;
    chunks.push_back({s.chunks[0].start, s.chunks[0].length});
    scheduler.Commit(s);
    if (s.chunks[0].need_logits) seq->tokens.push_back(7);
    scheduler.EndStep();
    if (land_loads) f.kv->transfers().AwaitLane(Lane::kDiskRead);
  }
  // Blocks 5..9 when loaded: the bytes stored for them.
  const std::span<const BlockId> table = f.kv->BlockTable(2);
  EXPECT_GE(table.size(), 10u);
  for (size_t i = 5; i < std::min<size_t>(table.size(), 10) && chunks.size() == 2 && chunks[1].first == 40; ++i) {
    const uint8_t want = static_cast<uint8_t>((1 * 31 + static_cast<int64_t>(i)) & 0xff);
    EXPECT_EQ(f.backend.Block(table[i])[0], want) << "block " << i;
  }
  *plans = scheduler.load_plan_counters();
  EXPECT_TRUE(scheduler.VerifyIntegrity().ok()) << scheduler.VerifyIntegrity();
  scheduler.Remove(seq.get());
  return chunks;
}

// Blocks [from, to) of `seq` hold the bytes ComputeAndRestart stored for them.
void ExpectStoredBytes(testing::ManagerFixture& f, SequenceId seq, size_t from, size_t to) {
  const std::span<const BlockId> table = f.kv->BlockTable(seq);
  ASSERT_GE(table.size(), to);
  for (size_t i = from; i < to; ++i) {
    EXPECT_EQ(f.backend.Block(table[i])[0], static_cast<uint8_t>((1 * 31 + static_cast<int64_t>(i)) & 0xff)) << i;
  }
}

TEST(LoadPlanAttachTest, FrontComputedWhileTheBackLoads) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens);
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f));
  // Computing a block costs what loading one is assumed to cost before any is measured:
  // half of the 10 slow blocks computed, half loaded.
  const double load_seconds = GuessedLoadSeconds(f);
  FixedCostPolicy policy(load_seconds / kBlockTokens);
  Scheduler::LoadPlanCounters plans;
  const auto chunks = RunPlanned(f, &policy, &plans);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], Chunk(0, 20));   // the front 5 blocks
  EXPECT_EQ(chunks[1], Chunk(40, 1));   // after the 5 loaded
  EXPECT_EQ(plans.plans, 1);
  EXPECT_EQ(plans.computed_blocks, 5);
  EXPECT_EQ(plans.loaded_blocks, 5);
  // Its progress at the second step's start: the front computed, the attach due there.
  ASSERT_FALSE(plans.last.progress.empty());
  EXPECT_EQ(plans.last.progress[0].computed_tokens, 20);
  EXPECT_EQ(plans.last.progress[0].attach_at, 5);
  const KvCacheCounters& c = f.kv->counters();
  EXPECT_EQ(c.prefix_hits[static_cast<int>(Tier::kHost)] + c.prefix_hits[static_cast<int>(Tier::kDisk)], 5);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok());
}

// Loads that have not landed when the front is computed are computed, not waited for: with
// each disk read taking 300 ms, the second chunk starts right after the front and the two
// steps take far less than one read.
TEST(LoadPlanAttachTest, LoadsStillInFlightAreComputedNotWaitedFor) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens, /*write_delay=*/{},
                            /*read_delay=*/std::chrono::milliseconds(300));
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f));
  const double load_seconds = GuessedLoadSeconds(f);
  FixedCostPolicy policy(load_seconds / kBlockTokens);
  Scheduler::LoadPlanCounters plans;
  const auto start = std::chrono::steady_clock::now();
  const auto chunks = RunPlanned(f, &policy, &plans, /*land_loads=*/false);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], Chunk(0, 20));   // the front 5 blocks, as planned
  EXPECT_EQ(chunks[1], Chunk(20, 21));  // the back computed: none of its reads had landed
  EXPECT_LT(elapsed, std::chrono::milliseconds(250));
  EXPECT_EQ(plans.plans, 1);
  const KvCacheCounters& c = f.kv->counters();
  EXPECT_EQ(c.prefix_hits[static_cast<int>(Tier::kHost)] + c.prefix_hits[static_cast<int>(Tier::kDisk)], 0);
  f.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok());
}

// Loads still in flight at the planned attach (they land from the back): the front computes
// on toward them and attaches again where the two should meet; there, what has landed by
// then joins. 40 slow blocks, 20 computed and 20 loading as planned; every read takes 300
// ms, so none has landed at the first attach; the next is half-way through the 20 (the
// load cost still the guess), and by then the reads have landed (drained).
TEST(LoadPlanAttachTest, LateLoadsMeetTheComputeFromTheBack) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens, /*write_delay=*/{},
                            /*read_delay=*/std::chrono::milliseconds(300));
  constexpr int kLength = 161;  // 40 full blocks + 1 token
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f, kLength));
  FixedCostPolicy policy(GuessedLoadSeconds(f) / kBlockTokens);
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/true}, f.kv.get(), &policy);
  auto seq = PromptSequence(2, kLength);
  scheduler.Enqueue(seq.get());
  const auto chunks = testing::StepChunks(*f.kv, scheduler, *seq, /*steps=*/3, /*drain_after=*/1);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0], Chunk(0, 80));    // the front 20 blocks, as planned
  EXPECT_EQ(chunks[1], Chunk(80, 40));   // on toward the loads: half of the 20 left
  EXPECT_EQ(chunks[2], Chunk(160, 1));   // blocks 30..39 joined
  const Scheduler::LoadPlanCounters& plans = scheduler.load_plan_counters();
  EXPECT_EQ(plans.plans, 1);
  // Every planned read started at once (more than a read-ahead's budget of a quarter of the
  // host tier, 16): blocks 20..39, from the back, then as many again in front of the split
  // (0..19; the front overtakes them).
  EXPECT_EQ(plans.last.disk_reads_started, 40);
  EXPECT_EQ(plans.last.attaches, 2);
  EXPECT_EQ(plans.last.attached_blocks, 10);
  ExpectStoredBytes(f, /*seq=*/2, 30, 40);
  EXPECT_TRUE(scheduler.VerifyIntegrity().ok()) << scheduler.VerifyIntegrity();
  scheduler.Remove(seq.get());
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok());
}

// Loads running late, seen between the front's steps: the attach moves to where computing
// on and loading meet (Replan) before the front reaches the planned point, so no attach
// is spent on a point where nothing has landed yet.
TEST(LoadPlanAttachTest, LateLoadsMoveTheAttachBeforeTheFrontGetsThere) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens, /*write_delay=*/{},
                            /*read_delay=*/std::chrono::milliseconds(300));
  constexpr int kLength = 161;  // 40 full blocks + 1 token
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f, kLength));
  FixedCostPolicy policy(GuessedLoadSeconds(f) / kBlockTokens);
  // Steps of 10 blocks: the planned front (20 blocks) takes two.
  Scheduler scheduler({40, 8, 0, /*load_or_recompute=*/true}, f.kv.get(), &policy);
  auto seq = PromptSequence(2, kLength);
  scheduler.Enqueue(seq.get());
  const auto chunks = testing::StepChunks(*f.kv, scheduler, *seq, /*steps=*/4, /*drain_after=*/2);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0], Chunk(0, 40));
  EXPECT_EQ(chunks[1], Chunk(40, 40));   // planned front ends at 80; nothing has landed
  EXPECT_EQ(chunks[2], Chunk(80, 40));   // re-planned: on to block 30, no attach at 80
  EXPECT_EQ(chunks[3], Chunk(160, 1));   // blocks 30..39 joined at 120
  const Scheduler::LoadPlanCounters& plans = scheduler.load_plan_counters();
  EXPECT_EQ(plans.plans, 1);
  EXPECT_EQ(plans.last.disk_reads_started, 40);  // 20..39 planned, 0..19 in front of the split
  EXPECT_EQ(plans.last.attaches, 1);
  EXPECT_EQ(plans.last.attached_blocks, 10);
  ExpectStoredBytes(f, /*seq=*/2, 30, 40);
  EXPECT_TRUE(scheduler.VerifyIntegrity().ok()) << scheduler.VerifyIntegrity();
  scheduler.Remove(seq.get());
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok());
}

// Loads faster than planned (the plan's load speed, the guess, is below what the reads
// deliver: here they land at once): the reads started in front of the split land too
// while the front computes its first step, and the attach moves there (Replan). 40 slow
// blocks, 20 planned computed; the front computes 10 and the other 30 join.
TEST(LoadPlanAttachTest, LoadsFasterThanPlannedJoinInFrontOfTheSplit) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens);
  constexpr int kLength = 161;  // 40 full blocks + 1 token
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f, kLength));
  FixedCostPolicy policy(GuessedLoadSeconds(f) / kBlockTokens);
  Scheduler scheduler({40, 8, 0, /*load_or_recompute=*/true}, f.kv.get(), &policy);  // steps of 10 blocks
  auto seq = PromptSequence(2, kLength);
  scheduler.Enqueue(seq.get());
  const auto chunks = testing::StepChunks(*f.kv, scheduler, *seq, /*steps=*/2, /*drain_after=*/0);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], Chunk(0, 40));    // 10 blocks of the 20 planned
  EXPECT_EQ(chunks[1], Chunk(160, 1));   // blocks 10..39 joined
  const Scheduler::LoadPlanCounters& plans = scheduler.load_plan_counters();
  EXPECT_EQ(plans.last.compute_blocks, 20);
  EXPECT_EQ(plans.last.disk_reads_started, 40);
  EXPECT_EQ(plans.last.attached_blocks, 30);
  ExpectStoredBytes(f, /*seq=*/2, 10, 40);
  EXPECT_TRUE(scheduler.VerifyIntegrity().ok()) << scheduler.VerifyIntegrity();
  scheduler.Remove(seq.get());
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok());
}

// A plan's loads take a host slot only where nothing waits for it. The host tier is full
// of another prompt's blocks whose disk writes (300 ms each) are in flight: making room
// for a load would wait for them, so no read starts (the plan computes those blocks) and
// nothing waits for a write. Once the writes have landed, the same blocks make room at
// once: they are on disk.
TEST(LoadPlanAttachTest, LoadsNeverWaitForDiskWritesToMakeHostRoom) {
  testing::ManagerFixture f(/*device=*/16, /*host=*/4, /*disk=*/64, kBlockTokens);
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f));  // the prompt's 10 full blocks only on disk
  testing::SlowFileIo slow(&f.io, /*write_delay=*/std::chrono::milliseconds(300), /*read_delay=*/{});
  f.kv.reset();
  f.kv_options.file_io = &slow;
  absl::StatusOr<std::unique_ptr<KvCacheManager>> reopened = KvCacheManager::Create(f.kv_options, &f.backend);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  f.kv = *std::move(reopened);

  // Another prompt's 4 full blocks, computed and cached on the device (their write-behind
  // queued, not started: the step is not ended yet).
  std::vector<int32_t> other_tokens;
  for (int i = 0; i < 17; ++i) other_tokens.push_back(5000 + i * 7);
  Sequence other(3, 3, other_tokens, SamplingParams{});
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/false}, f.kv.get(), nullptr);
  scheduler.Enqueue(&other);
  Schedule s = NextOf(scheduler);
  ASSERT_EQ(s.chunks.size(), 1u);
  scheduler.Commit(s);
  scheduler.Remove(&other);
  // A reservation of every device block moves them to the host tier, filling it; the end of
  // the step then starts their writes to disk from there.
  ASSERT_TRUE(f.kv->Reserve(/*seq=*/100, 16 * kBlockTokens).ok());
  ASSERT_EQ(f.kv->Stats().tier(Tier::kHost).cached_blocks, 4);
  f.kv->FinishStep(/*idle=*/false);
  ASSERT_EQ(f.kv->transfers().num_in_flight(Lane::kDiskWrite), 4);

  const std::vector<int32_t> prompt = PromptSequence(2)->tokens;
  const KvCacheCounters before = f.kv->counters();
  EXPECT_EQ(f.kv->LoadPrefixAhead(prompt, nullptr, 0, 10), 0);
  EXPECT_EQ(f.kv->counters().disk.write_waits, before.disk.write_waits);
  EXPECT_GT(f.kv->counters().reads_without_host_slot, before.reads_without_host_slot);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kHost).cached_blocks, 4);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();

  f.kv->transfers().AwaitLane(Lane::kDiskWrite);
  const KvCacheCounters drained = f.kv->counters();
  EXPECT_EQ(f.kv->LoadPrefixAhead(prompt, nullptr, 0, 10), 4);  // the back 4 of the 10
  EXPECT_EQ(f.kv->counters().disk.write_waits, drained.disk.write_waits);
  EXPECT_EQ(f.kv->counters().disk.host_evictions_on_disk, drained.disk.host_evictions_on_disk + 4);
  f.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
  f.kv->Release(100);
  f.kv.reset();  // before the slow disk it writes through
}

// A manager over a disk file holding cached blocks reads a few of them at creation, on the
// reader threads, to measure the disk's read speed: the first plan splits by it, not by the
// guess. The probes count bytes and time, not reads, and change nothing cached.
TEST(LoadPlanAttachTest, DiskReadSpeedIsProbedAtCreation) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens);
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f));  // 10 blocks on disk
  EXPECT_EQ(f.kv->Stats().disk_store.bytes_read, 0) << "the fixture turns the probe off";
  f.kv_options.preparation.probe_disk_read_speed = true;
  f.Reopen();
  f.kv->transfers().AwaitLane(Lane::kDiskRead);
  const DiskBlockStore::Counters c = f.kv->Stats().disk_store;
  EXPECT_EQ(c.reads, 0);
  EXPECT_EQ(c.bytes_read, Transfers::kReaderThreads * static_cast<int64_t>(f.kv->block_bytes()));
  ASSERT_GT(c.read_seconds, 0);
  EXPECT_DOUBLE_EQ(f.kv->disk().SecondsPerBlock(),
                   static_cast<double>(f.kv->block_bytes()) / (static_cast<double>(c.bytes_read) / c.read_seconds));
  EXPECT_EQ(f.kv->Stats().tier(Tier::kDisk).cached_blocks, 10);
  EXPECT_EQ(f.kv->Stats().tier(Tier::kHost).cached_blocks, 0);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok()) << f.kv->VerifyIntegrity();
}

TEST(LoadPlanAttachTest, CheapLoadsLoadEverythingCheapComputeComputesEverything) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens);
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f));
  FixedCostPolicy slow_compute(1.0);
  Scheduler::LoadPlanCounters plans;
  auto chunks = RunPlanned(f, &slow_compute, &plans);
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0], Chunk(40, 1));  // all 10 loaded
  EXPECT_EQ(plans.plans, 0);
  f.Reopen();
  FixedCostPolicy fast_compute(1e-15);
  chunks = RunPlanned(f, &fast_compute, &plans);
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0], Chunk(0, 41));  // all computed again
  EXPECT_EQ(plans.plans, 1);
  EXPECT_EQ(plans.computed_blocks, 10);
  EXPECT_EQ(plans.loaded_blocks, 0);
}

// A long sequence (longer than the device tier, docs/LONG_CONTEXT.md) gets no load plan:
// under the costs that split an ordinary prompt in half (FrontComputedWhileTheBackLoads),
// its prefix is matched whole from the disk and its first chunk starts after it.
TEST(LoadPlanAttachTest, LongSequenceGetsNoPlan) {
  testing::ManagerFixture f(/*device=*/64, /*host=*/64, /*disk=*/64, kBlockTokens);
  ASSERT_NO_FATAL_FAILURE(ComputeAndRestart(f));
  const double load_seconds = GuessedLoadSeconds(f);
  FixedCostPolicy policy(load_seconds / kBlockTokens);
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/true, /*max_long_running=*/1}, f.kv.get(), &policy);
  SamplingParams params;
  params.max_new_tokens = 300;  // 41 + 300 positions: 86 blocks, the device tier has 64
  Sequence seq(2, 2, PromptSequence(2)->tokens, params);
  scheduler.Enqueue(&seq);
  Schedule s = NextOf(scheduler);
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(Chunk(s.chunks[0].start, s.chunks[0].length), Chunk(40, 1));
  EXPECT_EQ(scheduler.load_plan_counters().plans, 0);
  const KvCacheCounters& c = f.kv->counters();
  EXPECT_EQ(c.prefix_hits[static_cast<int>(Tier::kHost)] + c.prefix_hits[static_cast<int>(Tier::kDisk)], 10);
  scheduler.Commit(s);
  if (s.chunks[0].need_logits) seq.tokens.push_back(7);
  scheduler.EndStep();
  EXPECT_TRUE(scheduler.VerifyIntegrity().ok()) << scheduler.VerifyIntegrity();
  scheduler.Remove(&seq);
  EXPECT_TRUE(f.kv->VerifyIntegrity().ok());
}

}  // namespace
}  // namespace kvtier
