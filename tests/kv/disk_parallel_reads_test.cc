// DiskIoThread with several threads (the KV manager's reader): reads queued back to back
// run at once, a write runs alone and in its place in the queue, results come back in
// submission order; and the store's read clock counts overlapping reads' time once.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kv/disk_io_thread.h"
#include "kv/disk_store_fixture.h"
#include "storage/disk_block_store.h"
#include "testing/fake_file_io.h"
#include "testing/file_io_wrapper.h"

namespace kvtier {
namespace {

using testing::BlockKey;
using testing::BlockTokens;

// A FileIo over FakeFileIo whose block payload reads wait until `gate` of them have
// started (or a deadline passes: a serial reader fails the test instead of hanging it), so
// that a test can see reads overlap without timing anything; then each takes `hold` more.
class GatedReadsIo final : public testing::FileIoWrapper {
 public:
  GatedReadsIo(FakeFileIo* inner, int gate, std::chrono::milliseconds hold = std::chrono::milliseconds(0))
      : FileIoWrapper(inner), state_(std::make_shared<State>()) {
    state_->gate = gate;
    state_->hold = hold;
  }
  int max_reads_at_once() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->max_in_progress;
  }
  int gate_timeouts() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->timeouts;
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForReadWrite(const std::string& path, int64_t size) override {
    auto file = inner()->OpenForReadWrite(path, size);
    if (!file.ok()) return file.status();
    // The slot file, not the index or the journal.
    const bool slots = testing::PathEndsWith(path, ".kv");
    return std::unique_ptr<RandomAccessFile>(new File(std::move(*file), slots ? state_ : nullptr));
  }

 private:
  struct State {
    mutable std::mutex mu;
    std::condition_variable cv;
    int gate = 1;
    std::chrono::milliseconds hold{0};
    int arrived = 0;  // payload reads that reached the gate
    int in_progress = 0;
    int max_in_progress = 0;
    int timeouts = 0;
  };
  class File final : public testing::RandomAccessFileWrapper {
   public:
    File(std::unique_ptr<RandomAccessFile> inner, std::shared_ptr<State> state)
        : RandomAccessFileWrapper(std::move(inner)), state_(std::move(state)) {}
    absl::Status Pread(int64_t offset, size_t n, void* out) override {
      // A slot's header starts it (aligned); the payload follows.
      if (state_ == nullptr || offset % static_cast<int64_t>(DiskBlockStore::kSlotAlignment) == 0) {
        return inner()->Pread(offset, n, out);
      }
      return GatedPread(offset, n, out);
    }
    // The store's direct reads take a whole slot (header and payload) at once.
    absl::Status PreadDirect(int64_t offset, size_t n, void* out) override {
      if (state_ == nullptr) return inner()->Pread(offset, n, out);
      return GatedPread(offset, n, out);
    }
    absl::Status GatedPread(int64_t offset, size_t n, void* out) {
      {
        std::unique_lock<std::mutex> lock(state_->mu);
        ++state_->arrived;
        ++state_->in_progress;
        state_->max_in_progress = std::max(state_->max_in_progress, state_->in_progress);
        state_->cv.notify_all();
        if (!state_->cv.wait_for(lock, std::chrono::seconds(5), [&] { return state_->arrived >= state_->gate; })) {
          ++state_->timeouts;
        }
      }
      std::this_thread::sleep_for(state_->hold);
      absl::Status status = inner()->Pread(offset, n, out);
      std::lock_guard<std::mutex> lock(state_->mu);
      --state_->in_progress;
      return status;
    }
    absl::Status Pwrite(int64_t offset, const void* data, size_t n) override {
      if (state_ != nullptr) {
        std::lock_guard<std::mutex> lock(state_->mu);
        EXPECT_EQ(state_->in_progress, 0) << "a write ran while a read was in progress";
      }
      return inner()->Pwrite(offset, data, n);
    }

   private:
    std::shared_ptr<State> state_;
  };
  std::shared_ptr<State> state_;
};

constexpr size_t kBytes = 512;

std::unique_ptr<DiskBlockStore> OpenParallelStore(FileIo* io, int64_t slots) {
  return testing::OpenFakeStore(io, "/fake/reads.kv", kBytes, slots);
}
std::vector<uint8_t> Block(int n) { return std::vector<uint8_t>(kBytes, static_cast<uint8_t>(11 * n + 3)); }

TEST(DiskParallelReadsTest, ReadsRunAtOnceAndReportInSubmissionOrder) {
  FakeFileIo fake;
  constexpr int kThreads = 4;
  GatedReadsIo io(&fake, kThreads);
  auto store = OpenParallelStore(&io, 16);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 8; ++i) {
    const std::vector<uint8_t> block = Block(i);
    ASSERT_TRUE(store->Write(i, BlockKey(i), BlockTokens(i), block.data(), DiskBlockStore::Content::kCached).ok());
  }
  std::vector<std::vector<uint8_t>> out(8, std::vector<uint8_t>(kBytes));
  {
    DiskIoThread reader(store.get(), kThreads);
    std::vector<int64_t> jobs;
    for (int i = 0; i < 8; ++i) jobs.push_back(reader.SubmitRead(i, BlockKey(i), BlockTokens(i), out[i].data()));
    // One read that fails (another block's key): reported in its place, the others unaffected.
    std::vector<uint8_t> wrong(kBytes);
    jobs.push_back(reader.SubmitRead(0, BlockKey(99), BlockTokens(0), wrong.data()));
    reader.WaitAll();
    const std::vector<DiskIoThread::Finished> done = reader.TakeFinished();
    ASSERT_EQ(done.size(), jobs.size());
    for (size_t i = 0; i < done.size(); ++i) {
      EXPECT_EQ(done[i].job, jobs[i]);
      EXPECT_EQ(done[i].status.ok(), i < 8) << i << ": " << done[i].status;
    }
  }
  EXPECT_EQ(io.max_reads_at_once(), kThreads);
  EXPECT_EQ(io.gate_timeouts(), 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], Block(i)) << i;
  EXPECT_EQ(store->counters().reads, 8);
}

TEST(DiskParallelReadsTest, ReadClockCountsOverlappingReadsOnce) {
  FakeFileIo fake;
  constexpr int kThreads = 4;
  constexpr auto kHold = std::chrono::milliseconds(50);
  GatedReadsIo io(&fake, kThreads, kHold);
  auto store = OpenParallelStore(&io, 16);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < kThreads; ++i) {
    const std::vector<uint8_t> block = Block(i);
    ASSERT_TRUE(store->Write(i, BlockKey(i), BlockTokens(i), block.data(), DiskBlockStore::Content::kCached).ok());
  }
  std::vector<std::vector<uint8_t>> out(kThreads, std::vector<uint8_t>(kBytes));
  DiskIoThread reader(store.get(), kThreads);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kThreads; ++i) reader.SubmitRead(i, BlockKey(i), BlockTokens(i), out[i].data());
  reader.WaitAll();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(io.gate_timeouts(), 0);
  // The four reads overlap, each at least kHold long: the clock ran at least kHold and at
  // most the wall time. Their own times, summed, are each at least kHold (all of it in the
  // file's reads), so the sum shows the four reads in flight at once: at least four kHolds
  // within at most one wall time of the clock.
  const DiskBlockStore::Counters c = store->counters();
  EXPECT_EQ(c.reads, kThreads);
  EXPECT_GE(c.read_seconds, 0.05);
  EXPECT_LE(c.read_seconds, wall);
  EXPECT_GE(c.file_read_seconds_summed, kThreads * 0.05);
  EXPECT_GE(c.read_seconds_summed, c.file_read_seconds_summed);
  EXPECT_LE(c.read_seconds_summed, kThreads * c.read_seconds);
  EXPECT_EQ(c.bytes_read, static_cast<int64_t>(kThreads * kBytes));
}

TEST(DiskParallelReadsTest, WriteWaitsForEarlierReadsAndHoldsBackLaterOnes) {
  FakeFileIo fake;
  constexpr int kThreads = 4;
  GatedReadsIo io(&fake, 2);
  auto store = OpenParallelStore(&io, 16);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 2; ++i) {
    const std::vector<uint8_t> block = Block(i);
    ASSERT_TRUE(store->Write(i, BlockKey(i), BlockTokens(i), block.data(), DiskBlockStore::Content::kCached).ok());
  }
  const std::vector<uint8_t> rewritten = Block(50);
  std::vector<uint8_t> before_a(kBytes), before_b(kBytes), after(kBytes);
  DiskIoThread thread(store.get(), kThreads);
  // Reads of slots 0 and 1, then a write replacing slot 0's block, then a read of it: the
  // first two see the old block (the write waits for them; the Pwrite check above fails if
  // a read is in progress), the last the new one (held back until the write ended).
  const int64_t a = thread.SubmitRead(0, BlockKey(0), BlockTokens(0), before_a.data());
  const int64_t b = thread.SubmitRead(1, BlockKey(1), BlockTokens(1), before_b.data());
  const int64_t w = thread.SubmitWrite(0, BlockKey(7), BlockTokens(7), rewritten.data(), DiskBlockStore::Content::kCached);
  thread.Wait(w);
  const int64_t c = thread.SubmitRead(0, BlockKey(7), BlockTokens(7), after.data());
  thread.WaitAll();
  const std::vector<DiskIoThread::Finished> done = thread.TakeFinished();
  ASSERT_EQ(done.size(), 4u);
  const int64_t order[] = {a, b, w, c};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(done[i].job, order[i]);
    EXPECT_TRUE(done[i].status.ok()) << done[i].status;
  }
  EXPECT_EQ(before_a, Block(0));
  EXPECT_EQ(before_b, Block(1));
  EXPECT_EQ(after, rewritten);
  EXPECT_EQ(io.max_reads_at_once(), 2);
  EXPECT_EQ(io.gate_timeouts(), 0);
}

}  // namespace
}  // namespace kvtier
