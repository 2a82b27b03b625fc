// The disk tier's read speed as load plans weigh it: the recent one (ReadSpeedWindow), and
// measured again when a plan finds disk blocks slow while the figure is stale
// (DiskTier::kSpeedStaleAfter), so that a figure measured slow at a busy restart does not
// keep every plan recomputing — and nothing read from disk — for good.
// Deterministic: a fake clock (KvCacheOptions::clock) measures the reads, and the fake disk
// advances it by a set time per block read (ClockedFileIo), so every read's time and every
// figure's age is exact; nothing sleeps and the machine's own speed never enters.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "kv/disk_tier.h"
#include "kv/manager_fixture.h"
#include "kv/read_speed_window.h"
#include "testing/fake_clock.h"
#include "testing/fixed_cost_policy.h"
#include "testing/file_io_wrapper.h"
#include "testing/wait_until.h"

namespace kvtier {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

// ---------------------------------------------------------------- the window

Clock::TimePoint At(int64_t s) { return Clock::TimePoint(seconds(s)); }

TEST(ReadSpeedWindowTest, NoFigureBeforeAnyRead) {
  ReadSpeedWindow w(100);
  EXPECT_FALSE(w.BytesPerSecond({}).has_value());
  w.Observe({}, At(1));
  EXPECT_FALSE(w.BytesPerSecond({}).has_value());
  EXPECT_FALSE(w.last_read_at().has_value());
}

// The figure follows the reads down and up, a window (100 bytes) at a time; a young window
// does not replace the last complete one.
TEST(ReadSpeedWindowTest, FollowsTheSpeedBothWays) {
  ReadSpeedWindow w(100);
  w.Observe({50, 0.5}, At(1));
  EXPECT_DOUBLE_EQ(*w.BytesPerSecond({50, 0.5}), 100);  // before any complete window: the open one
  w.Observe({100, 1.0}, At(2));
  EXPECT_DOUBLE_EQ(*w.BytesPerSecond({100, 1.0}), 100);  // complete
  // Slower: 50 bytes a second. Half a window keeps the last figure; a whole one replaces it.
  w.Observe({150, 2.0}, At(3));
  EXPECT_DOUBLE_EQ(*w.BytesPerSecond({150, 2.0}), 100);
  w.Observe({200, 3.0}, At(4));
  EXPECT_DOUBLE_EQ(*w.BytesPerSecond({200, 3.0}), 50);
  // Faster again: 1000 bytes a second; the lifetime average (300 / 3.1) would say 97.
  w.Observe({300, 3.1}, At(5));
  EXPECT_NEAR(*w.BytesPerSecond({300, 3.1}), 1000, 1e-6);
  // A window filled since the last Observe is the figure already.
  EXPECT_NEAR(*w.BytesPerSecond({400, 4.1}), 100, 1e-6);
}

// One probe round (Close) replaces a figure however young its window: 20 bytes at 1000/s
// after a complete window at 10/s.
TEST(ReadSpeedWindowTest, AProbeRoundReplacesTheFigureAtOnce) {
  ReadSpeedWindow w(100);
  w.Observe({100, 10.0}, At(1));
  ASSERT_DOUBLE_EQ(*w.BytesPerSecond({100, 10.0}), 10);
  w.Close({120, 10.02}, At(2));
  EXPECT_NEAR(*w.BytesPerSecond({120, 10.02}), 1000, 1e-6);
  // And back down the same way.
  w.Close({140, 12.02}, At(3));
  EXPECT_NEAR(*w.BytesPerSecond({140, 12.02}), 10, 1e-9);
  // A round that read nothing (failed) leaves the figure.
  w.Close({140, 12.5}, At(4));
  EXPECT_NEAR(*w.BytesPerSecond({140, 12.5}), 10, 1e-9);
}

TEST(ReadSpeedWindowTest, LastReadIsWhenTheBytesGrew) {
  ReadSpeedWindow w(100);
  w.Observe({10, 0.1}, At(1));
  EXPECT_EQ(w.last_read_at(), At(1));
  w.Observe({10, 0.1}, At(5));
  EXPECT_EQ(w.last_read_at(), At(1));
  w.Observe({20, 0.2}, At(7));
  EXPECT_EQ(w.last_read_at(), At(7));
}

// ---------------------------------------------------------------- the manager

// A FileIo over the fake disk whose block reads (a slot's payload) advance `clock` by
// read_cost each, taking no real time: the store's read clock sees exactly that long a read.
// Hold() stops the block reads at their start (inside the store's read clock) until
// Release(), so that a test can let time pass while reads are in progress.
class ClockedFileIo final : public testing::FileIoWrapper {
 public:
  ClockedFileIo(FileIo* inner, testing::FakeClock* clock)
      : FileIoWrapper(inner), state_(std::make_shared<State>()) {
    state_->clock = clock;
  }
  void set_read_cost(microseconds cost) { state_->cost.store(cost.count()); }
  void Hold() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->held = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->held = false;
    }
    state_->cv.notify_all();
  }
  // Block reads stopped by Hold now.
  int waiting() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->waiting;
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path, int64_t size) override {
    auto file = inner()->OpenForReadWrite(path, size);
    if (!file.ok()) return file.status();
    const bool slots = !testing::PathEndsWith(path, ".journal");
    return std::unique_ptr<RandomAccessFile>(new File(std::move(*file), state_, slots));
  }

 private:
  struct State {
    testing::FakeClock* clock = nullptr;
    std::atomic<int64_t> cost{0};  // microseconds
    mutable std::mutex mu;
    std::condition_variable cv;
    bool held = false;
    int waiting = 0;
  };
  class File final : public testing::RandomAccessFileWrapper {
   public:
    File(std::unique_ptr<RandomAccessFile> inner, std::shared_ptr<State> state, bool slots)
        : RandomAccessFileWrapper(std::move(inner)), state_(std::move(state)), slots_(slots) {}
    absl::Status Pread(int64_t offset, size_t n, void* out) override {
      // A payload follows its slot's (aligned) header: headers read at recovery cost nothing.
      if (slots_ && offset % static_cast<int64_t>(DiskBlockStore::kSlotAlignment) != 0) BlockRead();
      return inner()->Pread(offset, n, out);
    }
    absl::Status PreadDirect(int64_t offset, size_t n, void* out) override {
      if (slots_) BlockRead();
      return inner()->Pread(offset, n, out);
    }

   private:
    void BlockRead() {
      {
        std::unique_lock<std::mutex> lock(state_->mu);
        ++state_->waiting;
        state_->cv.wait(lock, [&] { return !state_->held; });
        --state_->waiting;
      }
      state_->clock->Advance(microseconds(state_->cost.load()));
    }
    const std::shared_ptr<State> state_;
    const bool slots_;
  };
  const std::shared_ptr<State> state_;
};

using testing::FixedCostPolicy;

constexpr int64_t kSpeedBlockTokens = 4;
constexpr int kPrompts = 4;
// Computing a block costs 10 ms: a block read of 1 s makes a plan compute every block, one
// of 1 us load every block.
constexpr double kComputeSecondsPerToken = 0.010 / kSpeedBlockTokens;
constexpr microseconds kSlowRead = seconds(1);
constexpr microseconds kFastRead{1};

// Prompt p: 10 full blocks + 1 token, no block shared with another prompt.
std::vector<int32_t> Prompt(int p) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 41; ++i) tokens.push_back(100 + p * 1000 + i * 3);
  return tokens;
}

struct TimedChunk {
  int64_t start = -1, length = -1;
  bool operator==(const TimedChunk&) const = default;
};

// The manager restarted over a disk holding kPrompts prompts' blocks (and nothing else),
// measuring its reads by `clock` through ClockedFileIo, read speed probes on; the probe
// round at creation has landed, each of its reads having taken `creation_read`.
class DiskReadSpeedTest : public ::testing::Test {
 protected:
  DiskReadSpeedTest() : f_(/*device=*/64, /*host=*/64, /*disk=*/64, kSpeedBlockTokens), io_(&f_.io, &clock_) {}

  void SetUp() override {
    Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/false}, f_.kv.get(), nullptr);
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int p = 0; p < kPrompts; ++p) {
      seqs.push_back(std::make_unique<Sequence>(p + 1, p + 1, Prompt(p), SamplingParams{}));
      scheduler.Enqueue(seqs.back().get());
    }
    absl::StatusOr<Schedule> s = scheduler.Next();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->chunks.size(), static_cast<size_t>(kPrompts));
    scheduler.Commit(*s);
    for (auto& seq : seqs) scheduler.Remove(seq.get());
    f_.kv_options.clock = &clock_;
    f_.kv_options.file_io = &io_;
    f_.kv_options.preparation.probe_disk_read_speed = true;
  }
  void TearDown() override {
    io_.Release();  // a failed test's held reads
    f_.kv.reset();  // before the FileIo it reads through
  }

  void Restart(microseconds creation_read) {
    io_.set_read_cost(creation_read);
    f_.Reopen();
    ASSERT_EQ(f_.kv->Stats().tier(Tier::kDisk).cached_blocks, 10 * kPrompts);
    f_.kv->transfers().AwaitLane(Lane::kDiskRead);
    ASSERT_EQ(f_.kv->Stats().disk_store.bytes_read, Transfers::kReaderThreads * static_cast<int64_t>(block_bytes()));
  }

  // Prompt p as a fresh request under a load plan: its first step's chunk.
  TimedChunk RunPrompt(Scheduler& scheduler, int p) {
    Sequence seq(100 + p, 100 + p, Prompt(p), SamplingParams{});
    scheduler.Enqueue(&seq);
    absl::StatusOr<Schedule> s = scheduler.Next();
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok() || s->chunks.size() != 1) return {};
    const TimedChunk chunk{s->chunks[0].start, s->chunks[0].length};
    scheduler.Commit(*s);
    if (s->chunks[0].need_logits) seq.tokens.push_back(7);
    scheduler.EndStep();
    scheduler.Remove(&seq);
    return chunk;
  }

  // A load plan's look at prompt p's prefix, as the scheduler's (seconds per block).
  double Probe(int p) {
    const KvCacheManager::SlowPrefix slow = f_.kv->ProbeSlowPrefix(/*seq=*/1000 + p, Prompt(p));
    EXPECT_EQ(slow.slow_blocks, 10);
    return slow.load_seconds_per_block;
  }

  int64_t SpeedProbes() const { return f_.kv->counters().disk.speed_probes; }
  int64_t ReadsInFlight() const { return f_.kv->transfers().num_in_flight(Lane::kDiskRead); }
  size_t block_bytes() const { return f_.kv->block_bytes(); }
  double SecondsPerBlock() const { return f_.kv->disk().SecondsPerBlock(); }

  testing::FakeClock clock_;
  testing::ManagerFixture f_;
  ClockedFileIo io_;
};

// The first measurement is slow (1 s a block): plans recompute every disk block, so nothing
// is read. Once the figure is stale, the next such plan (still recomputing: the probe is in
// flight) has a round of probe reads submitted; they land fast, and the plan after loads.
TEST_F(DiskReadSpeedTest, StaleSlowFigureIsProbedAgainThenPlansLoad) {
  ASSERT_NO_FATAL_FAILURE(Restart(kSlowRead));
  EXPECT_NEAR(SecondsPerBlock(), 1.0, 1e-9);
  FixedCostPolicy policy(kComputeSecondsPerToken);
  Scheduler scheduler({512, 8, 0, /*load_or_recompute=*/true}, f_.kv.get(), &policy);

  // Fresh: recomputed, no probe.
  EXPECT_EQ(RunPrompt(scheduler, 0), (TimedChunk{0, 41}));
  EXPECT_EQ(scheduler.load_plan_counters().computed_blocks, 10);
  EXPECT_EQ(SpeedProbes(), 0);

  // The disk is fast now, and the figure stale: recomputed again, but probed.
  io_.set_read_cost(kFastRead);
  clock_.Advance(DiskTier::kSpeedStaleAfter + seconds(1));
  EXPECT_EQ(RunPrompt(scheduler, 1), (TimedChunk{0, 41}));
  EXPECT_EQ(scheduler.load_plan_counters().computed_blocks, 20);
  EXPECT_NEAR(scheduler.load_plan_counters().last.load_seconds_per_block, 1.0, 1e-9);
  EXPECT_EQ(SpeedProbes(), 1);
  f_.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_NEAR(SecondsPerBlock(), 1e-6, 1e-12);  // the round's 8 reads of 1 us, not the average

  // Loaded: the whole prefix matched from the disk tier, the chunk only its last token.
  const KvCacheCounters before = f_.kv->counters();
  EXPECT_EQ(RunPrompt(scheduler, 2), (TimedChunk{40, 1}));
  const KvCacheCounters& after = f_.kv->counters();
  const int disk = static_cast<int>(Tier::kDisk), host = static_cast<int>(Tier::kHost);
  EXPECT_EQ(after.prefix_hits[disk] + after.prefix_hits[host] - before.prefix_hits[disk] - before.prefix_hits[host],
            10);
  EXPECT_EQ(scheduler.load_plan_counters().computed_blocks, 20);
  EXPECT_EQ(SpeedProbes(), 1);
  EXPECT_NEAR(f_.kv->Stats().disk_read_bytes_per_second, static_cast<double>(block_bytes()) / 1e-6,
              static_cast<double>(block_bytes()));
  EXPECT_TRUE(scheduler.VerifyIntegrity().ok()) << scheduler.VerifyIntegrity();
  EXPECT_TRUE(f_.kv->VerifyIntegrity().ok()) << f_.kv->VerifyIntegrity();
}

// No probe while the figure is fresh, while reads are in flight or have landed within the
// staleness period; once stale, one round, and none more after it landed.
TEST_F(DiskReadSpeedTest, NoProbeWhileFreshOrWhileReadsFlow) {
  ASSERT_NO_FATAL_FAILURE(Restart(kSlowRead));
  clock_.Advance(DiskTier::kSpeedStaleAfter - milliseconds(1));
  EXPECT_NEAR(Probe(0), 1.0, 1e-9);
  EXPECT_EQ(SpeedProbes(), 0);

  // Prompt 1 read ahead (a plan's loads): 10 reads, held in progress while the figure ages
  // past the period (those 5 s are the reads' time too), then landed, each taking 1 s more.
  io_.Hold();
  EXPECT_EQ(f_.kv->LoadPrefixAhead(Prompt(1), nullptr, 0, 10), 10);
  ASSERT_TRUE(testing::WaitUntil([&] { return io_.waiting() > 0; }, seconds(60)));
  clock_.Advance(DiskTier::kSpeedStaleAfter);
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 0);
  io_.Release();
  f_.kv->transfers().AwaitLane(Lane::kDiskRead);
  clock_.Advance(DiskTier::kSpeedStaleAfter - milliseconds(1));
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 0);
  EXPECT_EQ(ReadsInFlight(), 0);

  // Stale: one round of a read per reader thread, of prompt 0's blocks. The plan that has it
  // submitted weighs the reads before it (10 blocks in 15 s).
  clock_.Advance(milliseconds(1));
  io_.set_read_cost(kFastRead);
  EXPECT_NEAR(Probe(0), 1.5, 1e-9);
  EXPECT_EQ(SpeedProbes(), 1);
  EXPECT_EQ(ReadsInFlight(), Transfers::kReaderThreads);
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 1);
  f_.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_NEAR(Probe(0), 1e-6, 1e-12);  // landed: the round's figure
  clock_.Advance(DiskTier::kSpeedStaleAfter - milliseconds(1));
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 1);
  EXPECT_EQ(ReadsInFlight(), 0);
  // The probes cached nothing: the host holds prompt 1's blocks read ahead, no more.
  EXPECT_EQ(f_.kv->Stats().tier(Tier::kHost).cached_blocks, 10);
  EXPECT_TRUE(f_.kv->VerifyIntegrity().ok()) << f_.kv->VerifyIntegrity();
}

// A round in flight is no reason for another, however long it takes. (Its reads fail here,
// counting time but no bytes, so that the time passing leaves the figure as it was.)
TEST_F(DiskReadSpeedTest, NoSecondRoundWhileOneIsInFlight) {
  ASSERT_NO_FATAL_FAILURE(Restart(kSlowRead));
  clock_.Advance(DiskTier::kSpeedStaleAfter);
  io_.set_read_cost(microseconds(0));
  f_.io.FailNextReads(Transfers::kReaderThreads);
  io_.Hold();
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 1);
  ASSERT_TRUE(testing::WaitUntil([&] { return io_.waiting() > 0; }, seconds(60)));
  clock_.Advance(DiskTier::kSpeedStaleAfter * 3);
  EXPECT_NEAR(Probe(0), 1.0, 1e-9);
  EXPECT_EQ(SpeedProbes(), 1);
  io_.Release();
  f_.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_NEAR(SecondsPerBlock(), 1.0, 1e-9);
}

// A round whose reads fail measures nothing: the figure stays, and the next round waits a
// staleness period from this one (not from the last read), so a failing disk is not probed
// at every plan.
TEST_F(DiskReadSpeedTest, AFailedRoundWaitsAPeriodForTheNext) {
  ASSERT_NO_FATAL_FAILURE(Restart(kSlowRead));
  clock_.Advance(DiskTier::kSpeedStaleAfter);
  io_.set_read_cost(microseconds(0));  // the failing reads take no time
  f_.io.FailNextReads(Transfers::kReaderThreads);
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 1);
  f_.kv->transfers().AwaitLane(Lane::kDiskRead);
  EXPECT_NEAR(Probe(0), 1.0, 1e-9);
  EXPECT_EQ(SpeedProbes(), 1);
  clock_.Advance(DiskTier::kSpeedStaleAfter - milliseconds(1));
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 1);
  clock_.Advance(milliseconds(1));
  Probe(0);
  EXPECT_EQ(SpeedProbes(), 2);
  f_.kv->transfers().AwaitLane(Lane::kDiskRead);
}

// Without probe_disk_read_speed, nothing is probed, stale or not (the plans weigh what the
// reads measured, or the guess).
TEST_F(DiskReadSpeedTest, ProbesOffProbeNothing) {
  ASSERT_NO_FATAL_FAILURE(Restart(kSlowRead));
  f_.kv_options.preparation.probe_disk_read_speed = false;
  f_.Reopen();
  clock_.Advance(DiskTier::kSpeedStaleAfter * 2);
  const double guess = static_cast<double>(block_bytes()) / DiskTier::kGuessedBytesPerSecond;
  EXPECT_NEAR(Probe(0), guess, guess * 1e-9);
  EXPECT_EQ(SpeedProbes(), 0);
  EXPECT_EQ(ReadsInFlight(), 0);
}

}  // namespace
}  // namespace kvtier
