// The engine with kv_dtype fp8 on the CPU backend: the KV format is part of block identity
// and of the disk file's fingerprint (a file written in one format is never read as the
// other, while each format finds its own blocks again), fp8 KV stays batching-invariant and
// the stats name the format.
#include <unistd.h>

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "testing/engine_runs.h"

namespace kvtier {
namespace {

using testing::Greedy;
using testing::MakeEngine;
using testing::Prompt;
using testing::RunToEnd;

EngineOptions Options(StorageDType kv_dtype, const std::string& disk_path = "") {
  EngineOptions options = testing::CpuOptions();
  options.gpu_kv_bytes = 16 << 20;
  options.kv_dtype = kv_dtype;
  if (!disk_path.empty()) {
    options.disk_path = disk_path;
    options.disk_kv_bytes = 1 << 20;
    // Every block found on disk is loaded: the test counts disk hits, and the load-or-recompute
    // split (tested on its own) may compute a short prefix when the disk measures slow.
    options.load_or_recompute = false;
  }
  return options;
}

struct EngineRun {
  std::map<SequenceId, std::vector<int32_t>> tokens;
  int64_t disk_hits = 0;
};

EngineRun RunPrompts(const EngineOptions& options, const std::vector<std::vector<int32_t>>& prompts, int max_new) {
  EngineRun run;
  auto engine = MakeEngine(options);
  if (engine == nullptr) return run;
  for (const auto& prompt : prompts) EXPECT_TRUE(engine->Add(prompt, Greedy(max_new)).ok());
  run.tokens = RunToEnd(*engine, /*verify=*/false, /*max_steps=*/1000);
  run.disk_hits = testing::Stat(engine->Stats(), "prefix_hits", "disk");
  return run;
}

TEST(KvFp8Test, StatsNameTheKvFormat) {
  auto f32 = MakeEngine(Options(StorageDType::kAuto));
  auto fp8 = MakeEngine(Options(StorageDType::kFp8));
  ASSERT_TRUE(f32 != nullptr && fp8 != nullptr);
  const nlohmann::json a = f32->Stats(), b = fp8->Stats();
  EXPECT_EQ(a["kv_dtype"], "F32");
  EXPECT_EQ(b["kv_dtype"], "F8_E4M3");
}

TEST(KvFp8Test, Fp8KvIsBatchingInvariant) {
  const std::vector<int32_t> a = Prompt(1, 19), b = Prompt(2, 7);
  const EngineRun solo = RunPrompts(Options(StorageDType::kFp8), {a}, 8);
  const EngineRun batched = RunPrompts(Options(StorageDType::kFp8), {b, a}, 8);
  ASSERT_EQ(solo.tokens.size(), 1u);
  ASSERT_EQ(batched.tokens.size(), 2u);
  EXPECT_EQ(solo.tokens.begin()->second, std::next(batched.tokens.begin())->second);
}

TEST(KvFp8Test, DiskFileOfOneFormatIsNeverReadAsTheOther) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/kvtier_kv_fp8_", getpid(), ".kvdisk");
  std::filesystem::remove(path);
  const std::vector<int32_t> prompt = Prompt(3, 24);  // 6 full blocks of 4 tokens

  const EngineRun f32_write = RunPrompts(Options(StorageDType::kAuto, path), {prompt}, 4);
  const EngineRun f32_read = RunPrompts(Options(StorageDType::kAuto, path), {prompt}, 4);
  EXPECT_GT(f32_read.disk_hits, 0) << "control: the same format finds its blocks on disk";
  EXPECT_EQ(f32_write.tokens.begin()->second, f32_read.tokens.begin()->second);

  const EngineRun fp8_write = RunPrompts(Options(StorageDType::kFp8, path), {prompt}, 4);
  EXPECT_EQ(fp8_write.disk_hits, 0) << "fp32 blocks must not be read as fp8";
  const EngineRun fp8_read = RunPrompts(Options(StorageDType::kFp8, path), {prompt}, 4);
  EXPECT_GT(fp8_read.disk_hits, 0) << "fp8 blocks round-trip through the disk tier";
  EXPECT_EQ(fp8_write.tokens.begin()->second, fp8_read.tokens.begin()->second);

  const EngineRun f32_again = RunPrompts(Options(StorageDType::kAuto, path), {prompt}, 4);
  EXPECT_EQ(f32_again.tokens.begin()->second, f32_write.tokens.begin()->second);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvtier
