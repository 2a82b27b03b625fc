// Tests of Scheduler: decode first, token budget, chunked prefill, preemption order.
#include "engine/scheduler.h"

#include "gtest/gtest.h"
#include "testing/fake_backend.h"

namespace kvtier {
namespace {

std::unique_ptr<Sequence> MakeSequence(SequenceId id, int64_t prompt_len, int32_t priority = 0) {
  SamplingParams params;
  params.priority = priority;
  return std::make_unique<Sequence>(id, id, std::vector<int32_t>(static_cast<size_t>(prompt_len), 1), params);
}

// A KV manager over a fake backend with `blocks` device blocks of `block_tokens`.
struct Kv {
  Kv(int64_t blocks, int64_t block_tokens, int64_t host_blocks = 0) : backend(block_tokens) {
    EXPECT_TRUE(backend.AllocateKvPool(blocks).ok());
    KvCacheOptions options;
    options.block_tokens = block_tokens;
    options.device_blocks = blocks;
    options.host_blocks = host_blocks;
    manager = *KvCacheManager::Create(options, &backend);
  }
  KvCacheManager* operator->() { return manager.get(); }
  testing::FakeBackend backend;
  std::unique_ptr<KvCacheManager> manager;
};

// The next schedule (Next() only fails when a prefetch copy failed, which the fake
// backend never does).
Schedule Next(Scheduler& scheduler) {
  absl::StatusOr<Schedule> schedule = scheduler.Next();
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : Schedule{};
}

// Applies a schedule as the engine would, with a fixed "sampled" token.
void Commit(const Schedule& schedule) {
  for (const ScheduledChunk& c : schedule.chunks) {
    c.sequence->num_computed += c.length;
    if (c.need_logits) c.sequence->tokens.push_back(3);
  }
}

TEST(SchedulerTest, ChunksPrefillUnderTheTokenBudget) {
  Kv kv(100, 4);
  Scheduler scheduler({/*max_tokens_per_step=*/5, /*max_running=*/8}, kv.manager.get(), nullptr);
  auto a = MakeSequence(1, 12);
  scheduler.Enqueue(a.get());
  // The remainder first (12 mod 5), so that the last chunk, at the longest context, is full.
  Schedule s1 = Next(scheduler);
  ASSERT_EQ(s1.chunks.size(), 1u);
  EXPECT_EQ(s1.chunks[0].length, 2);
  EXPECT_FALSE(s1.chunks[0].need_logits);
  Commit(s1);
  Schedule s2 = Next(scheduler);
  EXPECT_EQ(s2.chunks[0].start, 2);
  EXPECT_EQ(s2.chunks[0].length, 5);
  EXPECT_FALSE(s2.chunks[0].need_logits);
  Commit(s2);
  Schedule s3 = Next(scheduler);
  EXPECT_EQ(s3.chunks[0].start, 7);
  EXPECT_EQ(s3.chunks[0].length, 5);
  EXPECT_TRUE(s3.chunks[0].need_logits);
  Commit(s3);
  Schedule s4 = Next(scheduler);
  EXPECT_EQ(s4.chunks[0].length, 1);  // decode
  EXPECT_TRUE(s4.chunks[0].need_logits);
}

TEST(SchedulerTest, PromptOfWholeBudgetsChunksInFullBudgets) {
  Kv kv(100, 4);
  Scheduler scheduler({/*max_tokens_per_step=*/5, /*max_running=*/8}, kv.manager.get(), nullptr);
  auto a = MakeSequence(1, 10);
  scheduler.Enqueue(a.get());
  Schedule s1 = Next(scheduler);
  ASSERT_EQ(s1.chunks.size(), 1u);
  EXPECT_EQ(s1.chunks[0].length, 5);
  Commit(s1);
  Schedule s2 = Next(scheduler);
  EXPECT_EQ(s2.chunks[0].length, 5);
  EXPECT_TRUE(s2.chunks[0].need_logits);
}

TEST(SchedulerTest, PromptAdmittedBesideDecodesTakesWhatTheBudgetLeaves) {
  Kv kv(100, 4);
  Scheduler scheduler({/*max_tokens_per_step=*/5, /*max_running=*/8}, kv.manager.get(), nullptr);
  auto a = MakeSequence(1, 3);
  scheduler.Enqueue(a.get());
  Commit(Next(scheduler));  // a prefilled, now decoding
  auto b = MakeSequence(2, 12);
  scheduler.Enqueue(b.get());
  // a's decode takes one token of the budget; b has no whole budget to align to and takes
  // the four left.
  Schedule s = Next(scheduler);
  ASSERT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(s.chunks[0].sequence, a.get());
  EXPECT_EQ(s.chunks[1].sequence, b.get());
  EXPECT_EQ(s.chunks[1].length, 4);
}

TEST(SchedulerTest, DecodesGoBeforeNewPrefills) {
  Kv kv(100, 4);
  Scheduler scheduler({/*max_tokens_per_step=*/4, /*max_running=*/8}, kv.manager.get(), nullptr);
  auto a = MakeSequence(1, 3);
  scheduler.Enqueue(a.get());
  Commit(Next(scheduler));  // a prefilled, now decoding
  auto b = MakeSequence(2, 10);
  scheduler.Enqueue(b.get());
  Schedule s = Next(scheduler);
  ASSERT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(s.chunks[0].sequence, a.get());
  EXPECT_EQ(s.chunks[0].length, 1);
  EXPECT_EQ(s.chunks[1].sequence, b.get());
  EXPECT_EQ(s.chunks[1].length, 3);  // what the budget leaves
}

TEST(SchedulerTest, PreemptsLowestPriorityMostRecentFirst) {
  Kv kv(3, 2);
  Scheduler scheduler({/*max_tokens_per_step=*/64, /*max_running=*/8}, kv.manager.get(), nullptr);
  auto high = MakeSequence(1, 2, /*priority=*/5);
  auto old_low = MakeSequence(2, 2);
  auto new_low = MakeSequence(3, 2);
  for (auto* s : {high.get(), old_low.get(), new_low.get()}) scheduler.Enqueue(s);
  Commit(Next(scheduler));  // each holds one full block and has a sampled token
  EXPECT_EQ(kv->num_available_device_blocks(), 0);
  Schedule s = Next(scheduler);  // everyone needs a second block: someone must go
  ASSERT_GE(scheduler.num_preemptions(), 1);
  EXPECT_EQ(new_low->state, SequenceState::kPaused);  // the first to go
  EXPECT_EQ(new_low->num_computed, 0);
  EXPECT_EQ(s.chunks[0].sequence, high.get());
  EXPECT_EQ(high->state, SequenceState::kRunning);
  // Only the lowest-priority, most recently admitted one had to go for the others' blocks.
  EXPECT_EQ(scheduler.num_preemptions(), 1 + (old_low->state == SequenceState::kPaused ? 1 : 0));
  EXPECT_TRUE(kv->VerifyIntegrity().ok());
}

TEST(SchedulerTest, RespectsMaxRunning) {
  Kv kv(100, 4);
  Scheduler scheduler({/*max_tokens_per_step=*/100, /*max_running=*/2}, kv.manager.get(), nullptr);
  auto a = MakeSequence(1, 2), b = MakeSequence(2, 2), c = MakeSequence(3, 2);
  for (auto* s : {a.get(), b.get(), c.get()}) scheduler.Enqueue(s);
  Schedule s = Next(scheduler);
  EXPECT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(scheduler.num_waiting(), 1);
}

// A long sequence (docs/LONG_CONTEXT.md) whose whole context needs more blocks than the
// backend can stream per step (CUDA: its staging buffers) is refused at admission, by number.
TEST(SchedulerTest, LongSequenceOverTheStreamingLimitIsRefused) {
  Kv kv(/*blocks=*/4, /*block_tokens=*/4, /*host_blocks=*/40);
  SchedulerOptions options;
  options.max_tokens_per_step = 16;
  options.max_running = 4;
  options.max_long_running = 1;
  options.max_long_blocks = 10;
  Scheduler scheduler(options, kv.manager.get(), nullptr);
  EXPECT_TRUE(scheduler.CheckFits(40).ok());  // 10 blocks: streamable
  const absl::Status refused = scheduler.CheckFits(41);
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("11 KV blocks"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("streams at most 10 host-resident blocks"), std::string::npos) << refused;
  EXPECT_TRUE(scheduler.CheckFits(16).ok());  // fits the device tier: no limit applies
}

}  // namespace
}  // namespace kvtier
