// Context creation does not wait for the lower tiers: the host tier is pinned and the disk
// file reserved on background threads, a chunk at a time, and each tier's slots join its
// pool as they are prepared. Gates (gated_preparation.h) hold the preparation where a test
// wants it, so these windows are deterministic: a context used while chunks arrive gives
// the tokens of one that waited, swaps fall back while the host tier is not pinned and
// never copy into unpinned memory, a disk found full late shrinks the tier cleanly, and
// freeing a context during preparation unpins and releases everything.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kv/chunked_preparer.h"
#include "kv/gated_preparation.h"
#include "kv/host_tier_memory.h"
#include "kv/kv_cache_manager.h"
#include "kv/tier_test_util.h"
#include "storage/disk_block_store.h"
#include "testing/fake_backend.h"
#include "testing/fake_file_io.h"
#include "testing/test_model.h"
#include "testing/wait_until.h"

namespace kvtier {
namespace {

using testing::FakeBackend;
using testing::Gate;
using testing::GatedFileIo;
using testing::GatedPinBackend;
using testing::PinLedger;

// ---------------------------------------------------------------- ChunkedPreparer

TEST(ChunkedPreparerTest, PreparesEveryChunkInOrder) {
  std::vector<std::pair<int64_t, int64_t>> calls;  // written by the preparer thread only
  ChunkedPreparer preparer(0, 7, 3, [&](int64_t begin, int64_t end) {
    calls.emplace_back(begin, end);
    return absl::OkStatus();
  });
  preparer.Wait();  // orders the thread's writes before the reads below
  EXPECT_TRUE(preparer.done());
  EXPECT_EQ(preparer.ready(), 7);
  EXPECT_TRUE(preparer.status().ok());
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 6}, {6, 7}}));
}

TEST(ChunkedPreparerTest, StartsWhereToldAndNeedsNoThreadWhenNothingIsLeft) {
  std::vector<std::pair<int64_t, int64_t>> calls;
  {
    ChunkedPreparer preparer(4, 10, 4, [&](int64_t begin, int64_t end) {
      calls.emplace_back(begin, end);
      return absl::OkStatus();
    });
    preparer.Wait();
    EXPECT_EQ(preparer.ready(), 10);
  }
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {8, 10}}));
  int called = 0;
  ChunkedPreparer nothing(5, 5, 1, [&](int64_t, int64_t) {
    ++called;
    return absl::OkStatus();
  });
  EXPECT_TRUE(nothing.done());
  EXPECT_EQ(nothing.ready(), 5);
  EXPECT_EQ(called, 0);
}

TEST(ChunkedPreparerTest, AFailedChunkStopsItForGood) {
  int calls = 0;
  ChunkedPreparer preparer(0, 10, 2, [&](int64_t begin, int64_t) {
    ++calls;
    return begin == 4 ? absl::ResourceExhaustedError("no room") : absl::OkStatus();
  });
  preparer.Wait();
  EXPECT_EQ(preparer.ready(), 4);  // [0, 4) stays prepared
  EXPECT_TRUE(absl::IsResourceExhausted(preparer.status())) << preparer.status();
  EXPECT_EQ(calls, 3);
}

TEST(ChunkedPreparerTest, CancelFinishesTheChunkInProgressAndStartsNoOther) {
  Gate gate;
  ChunkedPreparer preparer(0, 100, 1, [&](int64_t, int64_t) {
    gate.Pass();
    return absl::OkStatus();
  });
  gate.Allow(2);
  ASSERT_TRUE(gate.WaitArrived(3));  // chunks 0 and 1 done, chunk 2 waiting at the gate
  preparer.Cancel();
  gate.AllowAll();
  preparer.Wait();
  EXPECT_EQ(preparer.ready(), 3);
  EXPECT_EQ(gate.arrived(), 3);
  EXPECT_TRUE(preparer.status().ok());
}

// Paused, the chunk in progress finishes and no other starts until Resume; Cancel ends a
// paused preparer without waiting for a Resume.
TEST(ChunkedPreparerTest, PauseHoldsTheNextChunkUntilResume) {
  for (const bool resume : {true, false}) {
    Gate gate;
    ChunkedPreparer preparer(0, 100, 1, [&](int64_t, int64_t) {
      gate.Pass();
      return absl::OkStatus();
    });
    gate.Allow(1);
    ASSERT_TRUE(gate.WaitArrived(2));  // chunk 0 done, chunk 1 waiting at the gate
    preparer.Pause();
    gate.AllowAll();
    ASSERT_TRUE(gate.WaitPassed(2));
    // Chunk 1 counts as ready once its function has returned, a moment after the gate.
    testing::WaitUntil([&] { return preparer.ready() >= 2; }, std::chrono::seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // room for a chunk 2 to start
    EXPECT_EQ(gate.arrived(), 2);  // held before chunk 2
    EXPECT_EQ(preparer.ready(), 2);
    EXPECT_FALSE(preparer.done());
    if (resume) {
      preparer.Resume();
      preparer.Wait();
      EXPECT_EQ(preparer.ready(), 100);
    } else {
      preparer.Cancel();  // no Resume needed to end it
      preparer.Wait();
      EXPECT_EQ(preparer.ready(), 2);
    }
    EXPECT_TRUE(preparer.status().ok());
  }
}

// ---------------------------------------------------------------- HostTierMemory

constexpr size_t kPage = 4096;

TEST(HostTierMemoryTest, ABackendThatDoesNotPinIsReadyAtOnce) {
  FakeBackend backend(4);
  auto memory = HostTierMemory::Create(&backend, 10 * kPage + 1, kPage);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_TRUE((*memory)->done());
  EXPECT_EQ((*memory)->bytes(), 11 * kPage);  // whole pages
  EXPECT_EQ((*memory)->ready_bytes(), 11 * kPage);
  (*memory)->base()[11 * kPage - 1] = 1;  // writable to the end
}

TEST(HostTierMemoryTest, PinsChunkByChunkAndFreeingCancelsAndUnpinsExactlyThose) {
  auto ledger = std::make_shared<PinLedger>();
  GatedPinBackend backend(std::make_unique<FakeBackend>(4), ledger);
  auto created = HostTierMemory::Create(&backend, 10 * kPage, 3 * kPage);  // chunks of 3, 3, 3, 1 pages
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<HostTierMemory> memory = std::move(*created);
  EXPECT_EQ(memory->ready_bytes(), 0u);
  EXPECT_FALSE(memory->done());
  ledger->gate().Allow(1);
  ASSERT_TRUE(ledger->gate().WaitArrived(2));  // chunk 0 pinned, chunk 1 at the gate
  EXPECT_EQ(memory->ready_bytes(), 3 * kPage);
  memory->base()[3 * kPage - 1] = 7;  // the pinned prefix is usable meanwhile
  memory->CancelPinning();
  ledger->gate().AllowAll();  // chunk 1 finishes; 2 and 3 never start
  memory.reset();
  EXPECT_EQ(ledger->gate().arrived(), 2);
  EXPECT_EQ(ledger->pins(), 2);
  EXPECT_EQ(ledger->unpins(), 2);
  EXPECT_EQ(ledger->releases(), 1);
  EXPECT_EQ(ledger->released_while_pinned(), 0);
}

// A block never straddles two pins: each pin is its own registration on CUDA, where a copy
// across two is refused. Blocks of 3000 bytes against chunks asked as one page: every
// chunk is a whole number of pages and of blocks.
TEST(HostTierMemoryTest, ChunksHoldWholeBlocks) {
  constexpr size_t kBlock = 3000;
  auto ledger = std::make_shared<PinLedger>();
  GatedPinBackend backend(std::make_unique<FakeBackend>(4), ledger);
  ledger->gate().AllowAll();
  auto memory = HostTierMemory::Create(&backend, 1000 * kBlock, kPage, kBlock);
  ASSERT_TRUE(memory.ok()) << memory.status();
  (*memory)->WaitUntilDone();
  ASSERT_TRUE((*memory)->status().ok()) << (*memory)->status();
  std::vector<BlockCopy> blocks;
  for (int32_t i = 0; i < 1000; ++i) blocks.push_back({i, (*memory)->base() + static_cast<size_t>(i) * kBlock});
  EXPECT_TRUE(ledger->CheckPinned(blocks, kBlock).ok());
  EXPECT_GT(ledger->pins(), 1);
}

// Pinning waits for StartPinning when asked to (a context starts it after its warm-up).
TEST(HostTierMemoryTest, DeferredPinningStartsWhenAsked) {
  auto ledger = std::make_shared<PinLedger>();
  GatedPinBackend backend(std::make_unique<FakeBackend>(4), ledger);
  ledger->gate().AllowAll();
  auto memory = HostTierMemory::Create(&backend, 8 * kPage, 2 * kPage, 1, /*start_pinning=*/false);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_FALSE((*memory)->done());
  EXPECT_EQ((*memory)->ready_bytes(), 0u);
  EXPECT_EQ(ledger->pins(), 0);
  (*memory)->StartPinning();
  (*memory)->WaitUntilDone();
  EXPECT_EQ((*memory)->ready_bytes(), 8 * kPage);
  EXPECT_EQ(ledger->pins(), 4);
}

// Paced pinning: 8 chunks of 2 pages at 2 pages per 20 ms start at least 20 ms apart, so
// the last starts 140 ms after the first at the soonest; unpaced they take well under that.
TEST(HostTierMemoryTest, PacedPinningKeepsToItsSpeed) {
  auto ledger = std::make_shared<PinLedger>();
  GatedPinBackend backend(std::make_unique<FakeBackend>(4), ledger);
  ledger->gate().AllowAll();
  const auto start = std::chrono::steady_clock::now();
  auto memory = HostTierMemory::Create(&backend, 16 * kPage, 2 * kPage, 1, /*start_pinning=*/true,
                                       HostPinSchedule{.bytes_per_second = 2 * kPage / 0.020});
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_TRUE(ledger->gate().WaitPassed(1));
  EXPECT_LT((*memory)->ready_bytes(), 16 * kPage);
  (*memory)->WaitUntilDone();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ((*memory)->ready_bytes(), 16 * kPage);
  EXPECT_EQ(ledger->pins(), 8);
  EXPECT_GE(seconds, 0.140);
}

// The schedule's first bytes are pinned before Create returns (whole chunks: 3 pages asked,
// 2 chunks of 2 pinned), the rest in the background; a pin refused among the first stops
// there, with its status, and nothing after it is pinned.
TEST(HostTierMemoryTest, TheFirstBytesArePinnedBeforeCreateReturns) {
  auto ledger = std::make_shared<PinLedger>();
  GatedPinBackend backend(std::make_unique<FakeBackend>(4), ledger);
  ledger->gate().Allow(2);  // the background pins wait at the gate
  auto created = HostTierMemory::Create(&backend, 16 * kPage, 2 * kPage, 1, /*start_pinning=*/true,
                                        HostPinSchedule{.bytes_at_start = 3 * kPage});
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<HostTierMemory> memory = std::move(*created);
  EXPECT_EQ(memory->ready_bytes(), 4 * kPage);
  EXPECT_EQ(ledger->pins(), 2);
  EXPECT_FALSE(memory->done());
  ledger->gate().AllowAll();
  memory->WaitUntilDone();
  EXPECT_EQ(memory->ready_bytes(), 16 * kPage);
  memory.reset();
  EXPECT_EQ(ledger->pins(), ledger->unpins());

  auto refusing = std::make_shared<PinLedger>();
  GatedPinBackend refused_backend(std::make_unique<FakeBackend>(4), refusing);
  refusing->gate().FailStep(1);
  refusing->gate().AllowAll();
  auto stopped = HostTierMemory::Create(&refused_backend, 16 * kPage, 2 * kPage, 1, /*start_pinning=*/true,
                                        HostPinSchedule{.bytes_at_start = 8 * kPage});
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_TRUE((*stopped)->done());
  EXPECT_EQ((*stopped)->ready_bytes(), 2 * kPage);
  EXPECT_TRUE(absl::IsResourceExhausted((*stopped)->status())) << (*stopped)->status();
  stopped->reset();
  EXPECT_EQ(refusing->pins(), 1);
  EXPECT_EQ(refusing->unpins(), 1);
}

TEST(HostTierMemoryTest, APinRefusedKeepsThePrefixAndStops) {
  auto ledger = std::make_shared<PinLedger>();
  GatedPinBackend backend(std::make_unique<FakeBackend>(4), ledger);
  ledger->gate().FailStep(2);
  ledger->gate().AllowAll();
  auto memory = HostTierMemory::Create(&backend, 8 * kPage, 2 * kPage);
  ASSERT_TRUE(memory.ok()) << memory.status();
  (*memory)->WaitUntilDone();
  EXPECT_EQ((*memory)->ready_bytes(), 4 * kPage);
  EXPECT_TRUE(absl::IsResourceExhausted((*memory)->status())) << (*memory)->status();
  memory->reset();
  EXPECT_EQ(ledger->pins(), 2);
  EXPECT_EQ(ledger->unpins(), 2);
  EXPECT_EQ(ledger->released_while_pinned(), 0);
}

// ---------------------------------------------------------------- KvCacheManager

// Blocks of 256 tokens on the fake backend: 4096 bytes, one page; disk slots of 8192 bytes.
constexpr int64_t kPreparedBlockTokens = 256;

// Admits prepared slots until the tier has `n` ready (the preparation thread's progress is
// picked up by the stepping thread only); false after 10 s.
bool WaitReady(KvCacheManager& kv, Tier tier, int64_t n) {
  for (int i = 0; i < 10000; ++i) {
    kv.AdmitPreparedSlots();
    if (kv.Stats().tier(tier).ready_blocks >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

struct GatedManager {
  GatedManager(int64_t device, int64_t host, int64_t disk, TierPreparationOptions preparation)
      : ledger(std::make_shared<PinLedger>()),
        backend(std::make_unique<FakeBackend>(kPreparedBlockTokens), ledger),
        fake(static_cast<FakeBackend*>(&backend.inner())),
        gated_io(&io) {
    EXPECT_TRUE(backend.AllocateKvPool(device).ok());
    options.block_tokens = kPreparedBlockTokens;
    options.device_blocks = device;
    options.host_blocks = host;
    options.disk_blocks = disk;
    options.disk_path = "/fake/kv";
    options.file_io = &gated_io;
    options.model_fingerprint = 42;
    options.preparation = preparation;
  }
  void Open() {
    auto created = KvCacheManager::Create(options, &backend);
    ASSERT_TRUE(created.ok()) << created.status();
    kv = std::move(*created);
  }
  void Stamp(SequenceId seq) {
    for (size_t i = 0; i < kv->BlockTable(seq).size(); ++i) {
      std::memset(fake->Block(kv->BlockTable(seq)[i]), static_cast<int>(seq * 31 + static_cast<int64_t>(i)) & 0xff,
                  fake->kv_layout().BlockBytes());
    }
  }
  bool Check(SequenceId seq) {
    for (size_t i = 0; i < kv->BlockTable(seq).size(); ++i) {
      const uint8_t want = static_cast<uint8_t>((seq * 31 + static_cast<int64_t>(i)) & 0xff);
      const uint8_t* p = fake->Block(kv->BlockTable(seq)[i]);
      for (size_t b = 0; b < fake->kv_layout().BlockBytes(); ++b) {
        if (p[b] != want) return false;
      }
    }
    return true;
  }

  std::shared_ptr<PinLedger> ledger;
  GatedPinBackend backend;
  FakeBackend* fake;
  FakeFileIo io;
  GatedFileIo gated_io;
  KvCacheOptions options;
  std::unique_ptr<KvCacheManager> kv;
};

TEST(TierPreparationManagerTest, SwapsUseHostSlotsOnlyOnceTheirChunkIsPinned) {
  TierPreparationOptions preparation;
  preparation.host_chunk_bytes = 2 * kPage;  // two blocks per chunk
  preparation.host_bytes_at_create = 0;      // every chunk behind the gate
  GatedManager m(/*device=*/4, /*host=*/6, /*disk=*/0, preparation);
  ASSERT_NO_FATAL_FAILURE(m.Open());
  KvCacheManager& kv = *m.kv;
  EXPECT_EQ(kv.Stats().tier(Tier::kHost).capacity_blocks, 6);  // the budget, from the start
  EXPECT_EQ((kv.Stats().tier(Tier::kDevice).capacity_blocks + kv.Stats().tier(Tier::kHost).capacity_blocks + kv.Stats().tier(Tier::kDisk).capacity_blocks), 10);
  EXPECT_EQ(kv.Stats().tier(Tier::kHost).ready_blocks, 0);
  ASSERT_TRUE(kv.Reserve(1, 2 * kPreparedBlockTokens).ok());
  m.Stamp(1);
  // Nothing pinned yet: as if the host tier were full (and there is no disk tier).
  EXPECT_TRUE(absl::IsResourceExhausted(kv.SwapOut(1)));
  EXPECT_FALSE(kv.IsSwappedOut(1));
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();

  m.ledger->gate().Allow(1);
  ASSERT_TRUE(WaitReady(kv, Tier::kHost, 2));
  EXPECT_EQ(kv.Stats().tier(Tier::kHost).ready_blocks, 2);
  ASSERT_TRUE(kv.SwapOut(1).ok());
  EXPECT_EQ(kv.Stats().tier(Tier::kHost).used_blocks, 2);
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();

  ASSERT_TRUE(kv.Reserve(2, 2 * kPreparedBlockTokens).ok());
  m.Stamp(2);
  EXPECT_TRUE(absl::IsResourceExhausted(kv.SwapOut(2)));  // the pinned part is in use
  m.ledger->gate().Allow(1);
  ASSERT_TRUE(WaitReady(kv, Tier::kHost, 4));
  ASSERT_TRUE(kv.SwapOut(2).ok());
  EXPECT_EQ(kv.Stats().tier(Tier::kHost).used_blocks, 4);
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();

  ASSERT_TRUE(kv.SwapIn(1).ok());
  EXPECT_TRUE(m.Check(1));
  ASSERT_TRUE(kv.SwapIn(2).ok());
  EXPECT_TRUE(m.Check(2));
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();
  EXPECT_EQ(m.ledger->unpinned_copies(), 0);

  // Freed while the last chunk waits to be pinned: everything pinned is unpinned.
  ASSERT_TRUE(m.ledger->gate().WaitArrived(3));
  std::thread free_it([&] { m.kv.reset(); });
  m.ledger->gate().AllowAll();
  free_it.join();
  EXPECT_EQ(m.ledger->pins(), m.ledger->unpins());
  EXPECT_EQ(m.ledger->releases(), 1);
  EXPECT_EQ(m.ledger->released_while_pinned(), 0);
}

TEST(TierPreparationManagerTest, DiskSlotsJoinAsTheFileIsReservedAndALateFullDiskStopsThere) {
  const int64_t slot = DiskBlockStore::SlotBytes(kPage, kPreparedBlockTokens);
  TierPreparationOptions preparation;
  preparation.disk_bytes_at_create = 2 * slot;  // two slots before Create returns
  preparation.disk_chunk_bytes = 2 * slot;      // then two at a time
  GatedManager m(/*device=*/4, /*host=*/0, /*disk=*/8, preparation);
  ASSERT_NO_FATAL_FAILURE(m.Open());
  KvCacheManager& kv = *m.kv;
  EXPECT_EQ(kv.Stats().tier(Tier::kDisk).capacity_blocks, 8);
  EXPECT_EQ(kv.Stats().tier(Tier::kDisk).ready_blocks, 2);
  ASSERT_TRUE(kv.Reserve(1, 4 * kPreparedBlockTokens).ok());
  m.Stamp(1);
  EXPECT_TRUE(absl::IsResourceExhausted(kv.SwapOut(1)));  // 4 blocks, 2 slots ready
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();

  m.gated_io.gate().Allow(1);
  ASSERT_TRUE(WaitReady(kv, Tier::kDisk, 4));
  ASSERT_TRUE(kv.SwapOut(1).ok());
  kv.transfers().AwaitLane(Lane::kDiskWrite);
  ASSERT_TRUE(kv.SwapIn(1).ok());
  EXPECT_TRUE(m.Check(1));
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();

  // Someone else fills the disk: the next reservation fails, the tier keeps its 4 slots.
  m.io.set_capacity_bytes(m.io.used_bytes());
  m.gated_io.gate().AllowAll();
  for (int i = 0; i < 10000 && kv.Stats().tier(Tier::kDisk).preparation_error.empty(); ++i) {
    kv.AdmitPreparedSlots();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(kv.Stats().tier(Tier::kDisk).preparation_error.find("No space left"), std::string::npos)
      << kv.Stats().tier(Tier::kDisk).preparation_error;
  EXPECT_EQ(kv.Stats().tier(Tier::kDisk).ready_blocks, 4);
  EXPECT_EQ(kv.counters().io_errors, 1);
  kv.AdmitPreparedSlots();
  EXPECT_EQ(kv.counters().io_errors, 1);  // counted once
  ASSERT_TRUE(kv.SwapOut(1).ok());  // the 4 reserved slots still serve
  kv.transfers().AwaitLane(Lane::kDiskWrite);
  ASSERT_TRUE(kv.SwapIn(1).ok());
  EXPECT_TRUE(m.Check(1));
  EXPECT_TRUE(kv.VerifyIntegrity().ok()) << kv.VerifyIntegrity();
  EXPECT_EQ(m.gated_io.unreserved_ios(), 0);
}

TEST(TierPreparationManagerTest, APartlyReservedFileFromAnEarlierContextServesItsPrefix) {
  const int64_t slot = DiskBlockStore::SlotBytes(kPage, kPreparedBlockTokens);
  TierPreparationOptions preparation;
  preparation.disk_bytes_at_create = 3 * slot;
  preparation.disk_chunk_bytes = slot;
  GatedManager m(/*device=*/4, /*host=*/0, /*disk=*/8, preparation);
  m.gated_io.gate().FailStep(0);  // the first background reservation fails: 3 slots stay
  m.gated_io.gate().Allow(1);
  ASSERT_NO_FATAL_FAILURE(m.Open());
  std::vector<int32_t> tokens(3 * kPreparedBlockTokens + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 7);
  ASSERT_TRUE(m.kv->Reserve(1, static_cast<int64_t>(tokens.size())).ok());
  m.Stamp(1);
  m.kv->OnComputed(1, tokens, static_cast<int64_t>(tokens.size()));
  m.kv->Release(1);
  m.kv->host().WaitUntilPrepared();
  m.kv->disk().WaitUntilPrepared();
  EXPECT_EQ(m.kv->Stats().tier(Tier::kDisk).ready_blocks, 3);
  EXPECT_FALSE(m.kv->Stats().tier(Tier::kDisk).preparation_error.empty());
  m.kv.reset();  // its 3 cached blocks go to the 3 reserved slots; the rest never was reserved
  EXPECT_EQ(m.gated_io.allocations(), 0);
  absl::StatusOr<std::string> file = m.io.Contents("/fake/kv");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(static_cast<int64_t>(file->size()), 3 * slot);

  m.gated_io.gate().AllowAll();
  ASSERT_NO_FATAL_FAILURE(m.Open());
  EXPECT_GE(m.kv->Stats().tier(Tier::kDisk).ready_blocks, 3);
  EXPECT_EQ(m.kv->MatchPrefix(2, tokens), 3 * kPreparedBlockTokens);
  EXPECT_EQ(m.kv->counters().prefix_hits[static_cast<int>(Tier::kDisk)], 3);
  m.kv->host().WaitUntilPrepared();
  m.kv->disk().WaitUntilPrepared();
  EXPECT_EQ(m.kv->Stats().tier(Tier::kDisk).ready_blocks, 8);
  EXPECT_TRUE(m.kv->VerifyIntegrity().ok()) << m.kv->VerifyIntegrity();
  EXPECT_EQ(m.gated_io.unreserved_ios(), 0);
}

// ---------------------------------------------------------------- through the engine

using testing::OpenCheckpoint;
using testing::Prompt;
using testing::Reference;
using testing::RunAll;
using testing::SomePrompts;
using testing::TierOptions;
using testing::TierTestBlockBytes;
using testing::TinyLlamaDir;

std::unique_ptr<Engine> MakeGated(EngineOptions o, std::shared_ptr<PinLedger> ledger) {
  o.wrap_backend = [ledger](std::unique_ptr<Backend> inner) -> std::unique_ptr<Backend> {
    return std::make_unique<GatedPinBackend>(std::move(inner), ledger);
  };
  return testing::MakeEngine(o);
}

TEST(TierPreparationEngineTest, AContextUsedWhileItsHostTierIsPinnedMatchesOneThatWaited) {
  auto prompts = SomePrompts(6, 10);
  auto expected = Reference(prompts, 16);
  EngineOptions o = TierOptions(/*gpu=*/14, /*host=*/64);
  o.preemption = PreemptionMode::kSwap;
  o.max_tokens_per_step = 6;
  o.tier_preparation.host_chunk_bytes = 2 * TierTestBlockBytes();  // a page or two: many chunks
  o.tier_preparation.host_bytes_at_create = 0;                     // every chunk behind the gate

  // Waited: every chunk pinned before the first sequence is added.
  auto waited_ledger = std::make_shared<PinLedger>();
  waited_ledger->gate().AllowAll();
  auto waited = MakeGated(o, waited_ledger);
  const int64_t chunks = (64 * TierTestBlockBytes() + static_cast<int64_t>(kPage) - 1) /
                         ((o.tier_preparation.host_chunk_bytes + kPage - 1) / kPage * kPage);
  ASSERT_TRUE(waited_ledger->gate().WaitPassed(chunks));
  EXPECT_EQ(RunAll(*waited, prompts, 16), expected);
  EXPECT_GT(waited->Stats()["swaps_out"].get<int64_t>(), 0);
  waited.reset();
  EXPECT_EQ(waited_ledger->pins(), waited_ledger->unpins());

  // Used at once: a chunk is pinned every sixth step, so swaps run while chunks arrive.
  auto ledger = std::make_shared<PinLedger>();
  auto engine = MakeGated(o, ledger);
  int64_t steps_swapped_while_partial = 0;
  auto before_step = [&](int step) {
    if (step % 6 == 0 && step / 6 < chunks) {
      ASSERT_TRUE(ledger->gate().AllowOneAndWaitUntilItEnds(chunks));
    }
    nlohmann::json host = engine->Stats()["tiers"]["host"];
    if (host["ready_bytes"].get<int64_t>() < host["capacity_bytes"].get<int64_t>() &&
        host["used_bytes"].get<int64_t>() > 0) {
      ++steps_swapped_while_partial;
    }
  };
  EXPECT_EQ(RunAll(*engine, prompts, 16, before_step), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["swaps_out"].get<int64_t>(), 0) << s.dump();
  EXPECT_EQ(s["swaps_in"], s["swaps_out"]);
  EXPECT_GT(steps_swapped_while_partial, 0) << s.dump();
  EXPECT_LT(ledger->pins(), chunks) << "steps " << s["steps"] << ", partial " << steps_swapped_while_partial;  // still pinning: the free below cancels it
  EXPECT_EQ(ledger->unpinned_copies(), 0);

  std::thread free_it([&] { engine.reset(); });
  ledger->gate().AllowAll();
  free_it.join();
  EXPECT_EQ(ledger->pins(), ledger->unpins());
  EXPECT_EQ(ledger->releases(), 1);
  EXPECT_EQ(ledger->released_while_pinned(), 0);
}

TEST(TierPreparationEngineTest, SwapsToADiskFileStillBeingReservedAreExact) {
  auto prompts = SomePrompts(6, 20);
  auto expected = Reference(prompts, 16);
  FakeFileIo fake;
  GatedFileIo io(&fake);
  EngineOptions o = TierOptions(/*gpu=*/14, /*host=*/0, /*disk=*/64, "/fake/prepared.kv");
  o.file_io = &io;
  o.preemption = PreemptionMode::kSwap;
  const int64_t slot = DiskBlockStore::SlotBytes(static_cast<size_t>(TierTestBlockBytes()), testing::kTierTestBlockTokens);
  o.tier_preparation.disk_bytes_at_create = 0;
  o.tier_preparation.disk_chunk_bytes = 2 * slot;
  auto created = Engine::Create(OpenCheckpoint(TinyLlamaDir()), o);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Engine> engine = std::move(*created);
  const int64_t chunks = 64 / 2;
  int64_t steps_on_disk_while_partial = 0;
  auto before_step = [&](int step) {
    if (step % 2 == 0 && step / 2 < chunks) {
      ASSERT_TRUE(io.gate().AllowOneAndWaitUntilItEnds(chunks));
    }
    nlohmann::json disk = engine->Stats()["tiers"]["disk"];
    if (disk["ready_bytes"].get<int64_t>() < disk["capacity_bytes"].get<int64_t>() &&
        disk["used_bytes"].get<int64_t>() > 0) {
      ++steps_on_disk_while_partial;
    }
  };
  EXPECT_EQ(RunAll(*engine, prompts, 16, before_step), expected);
  nlohmann::json s = engine->Stats();
  EXPECT_GT(s["swaps_out"].get<int64_t>(), 0) << s.dump();
  EXPECT_GT(steps_on_disk_while_partial, 0) << s.dump();
  EXPECT_EQ(s["io_errors"], 0);
  EXPECT_EQ(io.unreserved_ios(), 0);
  std::thread free_it([&] { engine.reset(); });
  io.gate().AllowAll();
  free_it.join();
}

}  // namespace
}  // namespace kvtier
