// The process-wide log sink (common/log.h): levels, replacement while other threads log,
// re-entrance; and the lines the library logs for a backend fallback, a disabled tier, a
// corrupt disk block and a failed disk write.
#include "common/log.h"

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/tier_test_util.h"
#include "storage/disk_block_store.h"
#include "testing/fake_file_io.h"
#include "testing/test_model.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

struct Captured {
  std::mutex mu;
  std::vector<std::pair<int32_t, std::string>> lines;

  static void Sink(void* user, int32_t level, const char* message) {
    auto* self = static_cast<Captured*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->lines.emplace_back(level, message);
  }
  // The lines containing `text`.
  std::vector<std::pair<int32_t, std::string>> With(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::pair<int32_t, std::string>> out;
    for (const auto& line : lines) {
      if (line.second.find(text) != std::string::npos) out.push_back(line);
    }
    return out;
  }
};

// Installs a capturing sink for the test's duration.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(SetLogSink(&Captured::Sink, &captured_, 0).ok()); }
  void TearDown() override { ASSERT_TRUE(SetLogSink(nullptr, nullptr, 0).ok()); }
  Captured captured_;
};

TEST_F(LogTest, LevelsFilterAndLinesStayOneLine) {
  ASSERT_TRUE(SetLogSink(&Captured::Sink, &captured_, static_cast<int32_t>(LogLevel::kWarn)).ok());
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  Log(LogLevel::kInfo, "not ", "seen");
  Log(LogLevel::kWarn, "two\nlines ", 42);
  Log(LogLevel::kError, "an error");
  ASSERT_EQ(captured_.lines.size(), 2u);
  EXPECT_EQ(captured_.lines[0], std::make_pair(int32_t{2}, std::string("two lines 42")));
  EXPECT_EQ(captured_.lines[1].first, 3);
  EXPECT_FALSE(SetLogSink(&Captured::Sink, &captured_, 4).ok());
  EXPECT_FALSE(SetLogSink(&Captured::Sink, &captured_, -1).ok());
  ASSERT_TRUE(SetLogSink(nullptr, nullptr, 0).ok());
  EXPECT_FALSE(LogEnabled(LogLevel::kError));
}

// Once SetLogSink returns, the old sink is never called again, however many threads log.
TEST_F(LogTest, ReplacedSinkIsNeverCalledAgain) {
  struct Counting {
    std::atomic<int64_t> calls{0};
    static void Sink(void* user, int32_t, const char*) { static_cast<Counting*>(user)->calls.fetch_add(1); }
  };
  std::vector<Counting> sinks(20);
  std::atomic<bool> stop{false};
  std::vector<std::thread> loggers;
  for (int t = 0; t < 4; ++t) {
    loggers.emplace_back([&stop] {
      while (!stop.load()) Log(LogLevel::kInfo, "busy");
    });
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(SetLogSink(&Counting::Sink, &sinks[i], 0).ok());
    while (sinks[i].calls.load() < 10) std::this_thread::yield();
    ASSERT_TRUE(SetLogSink(nullptr, nullptr, 0).ok());
    const int64_t frozen = sinks[i].calls.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(sinks[i].calls.load(), frozen) << "sink " << i << " called after its replacement";
  }
  stop = true;
  for (std::thread& t : loggers) t.join();
}

// A sink cannot replace itself (it would wait for itself), and what the library would log
// from inside the sink is dropped instead of recursing.
TEST_F(LogTest, SinkCannotReenter) {
  struct Reentrant {
    absl::Status set_status;
    int calls = 0;
    static void Sink(void* user, int32_t, const char*) {
      auto* self = static_cast<Reentrant*>(user);
      ++self->calls;
      self->set_status = SetLogSink(nullptr, nullptr, 0);
      Log(LogLevel::kError, "from inside the sink");
    }
  } reentrant;
  ASSERT_TRUE(SetLogSink(&Reentrant::Sink, &reentrant, 0).ok());
  Log(LogLevel::kWarn, "once");
  EXPECT_EQ(reentrant.calls, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(reentrant.set_status)) << reentrant.set_status;
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn));  // still installed
}

TEST_F(LogTest, AutoBackendFallbackSaysWhy) {
  BackendOptions options;
  options.num_threads = 1;
  auto backend = CreateBackend("auto", *testing::OpenCheckpoint(testing::TinyLlamaDir()), options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const auto lines = captured_.With("backend auto: using the CPU (");
  if ((*backend)->name() != "cpu") {
    EXPECT_TRUE(lines.empty());  // a usable GPU: nothing to explain
    return;
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, static_cast<int32_t>(LogLevel::kWarn));
  EXPECT_THAT(lines[0].second, HasSubstr("CUDA"));  // the module's or the device's reason
  // One short reason, not every place the module was looked for.
  const std::string& line = lines[0].second;
  EXPECT_LT(line.size(), 200u) << line;
  EXPECT_EQ(line.find("libkvtier_cuda.so"), line.rfind("libkvtier_cuda.so")) << line;
}

TEST_F(LogTest, TierTooSmallForABlockIsReportedDisabled) {
  EngineOptions o = testing::TierOptions(/*gpu_blocks=*/16);
  o.host_kv_bytes = testing::TierTestBlockBytes() - 1;
  auto engine = Engine::Create(testing::OpenCheckpoint(testing::TinyLlamaDir()), o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const auto lines = captured_.With("host tier disabled");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, static_cast<int32_t>(LogLevel::kWarn));
  EXPECT_THAT(lines[0].second, HasSubstr("host_kv_bytes " + std::to_string(o.host_kv_bytes)));
  EXPECT_EQ((*engine)->Stats()["tiers"]["host"]["capacity_blocks"], 0);
}

// Cached prefix blocks reach the disk when a context is freed; the next context reads them.
TEST_F(LogTest, CorruptDiskBlockAndFailedWriteAreLogged) {
  FakeFileIo io;
  const std::string path = "/fake/log-test.kv";
  const std::vector<int32_t> shared = testing::Prompt(31, 20);
  auto make = [&] {
    EngineOptions o = testing::TierOptions(/*gpu_blocks=*/64, /*host_blocks=*/0, /*disk_blocks=*/64, path);
    o.file_io = &io;
    o.disk_write_behind = false;  // the blocks reach the disk when the context is freed
    auto engine = Engine::Create(testing::OpenCheckpoint(testing::TinyLlamaDir()), o);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  };
  {
    auto engine = make();
    testing::RunAll(*engine, {testing::Prompt(1, 3, shared)}, 4);
  }
  EXPECT_TRUE(captured_.With("corrupt").empty());
  // Damage every slot's bytes past its header.
  const int64_t slot_bytes = DiskBlockStore::SlotBytes(static_cast<size_t>(testing::TierTestBlockBytes()),
                                                        testing::kTierTestBlockTokens);
  for (int64_t slot = 0; slot < 64; ++slot) ASSERT_TRUE(io.FlipBit(path, slot * slot_bytes + 200, 3).ok());
  {
    auto engine = make();
    testing::RunAll(*engine, {testing::Prompt(2, 3, shared)}, 4);
    EXPECT_GT(engine->Stats()["corrupt_blocks_detected"].get<int64_t>(), 0);
    const auto lines = captured_.With("disk tier: corrupt block detected");
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines[0].first, static_cast<int32_t>(LogLevel::kWarn));
    EXPECT_THAT(lines[0].second, HasSubstr(path));
    EXPECT_THAT(lines[0].second, HasSubstr("recomputed"));
    io.FailNextWrites(1000);
  }  // freeing it writes the recomputed blocks: every write fails
  const auto failed = captured_.With("disk tier: write of slot");
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(failed[0].first, static_cast<int32_t>(LogLevel::kWarn));
  EXPECT_THAT(failed[0].second, HasSubstr("failed"));
  io.FailNextWrites(0);
}

}  // namespace
}  // namespace kvtier
