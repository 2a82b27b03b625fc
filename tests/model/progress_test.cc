// Progress and cancellation of the model layer's long calls (Checkpoint::Open,
// WriteRandomCheckpoint), and generation_config.json read by Checkpoint::Open.
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"
#include "test_util.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Report {
  std::string stage;
  int64_t done;
  int64_t total;
  std::thread::id thread;
};

// A ProgressFn recording every report; returns false at the first report of `cancel_stage`
// past 0 (never when empty).
ProgressFn Recorder(std::vector<Report>* reports, const std::string& cancel_stage = "") {
  return [reports, cancel_stage](std::string_view stage, int64_t done, int64_t total) {
    reports->push_back({std::string(stage), done, total, std::this_thread::get_id()});
    return !(stage == cancel_stage && done > 0);
  };
}

// The stages in order, each from 0 to its total without going back.
std::vector<std::string> Stages(const std::vector<Report>& reports) {
  std::vector<std::string> stages;
  for (size_t i = 0; i < reports.size(); ++i) {
    const Report& r = reports[i];
    const bool first = i == 0 || reports[i - 1].stage != r.stage;
    const bool last = i + 1 == reports.size() || reports[i + 1].stage != r.stage;
    if (first) {
      stages.push_back(r.stage);
      EXPECT_EQ(r.done, 0) << r.stage;
    } else {
      EXPECT_GE(r.done, reports[i - 1].done) << r.stage;
    }
    EXPECT_LE(r.done, r.total) << r.stage;
    if (last) {
      EXPECT_EQ(r.done, r.total) << r.stage;
    }
  }
  return stages;
}

RandomCheckpointSpec Tiny() {
  auto spec = RandomCheckpointPreset("tiny-llama");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->num_threads = 4;  // several writer threads: reports still come from the caller's
  return *spec;
}

TEST(ProgressTest, WritingACheckpointReportsBytesFromTheCallingThread) {
  testing::TempDir dir;
  std::vector<Report> reports;
  ASSERT_TRUE(WriteRandomCheckpoint(Tiny(), dir.path(), Recorder(&reports)).ok());
  EXPECT_THAT(Stages(reports), ElementsAre("weights"));
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(reports.back().total, (*ckpt)->TotalTensorBytes());
  EXPECT_GE(reports.size(), 3u);  // 0, what the workers wrote (at least once), the total
  for (const Report& r : reports) EXPECT_EQ(r.thread, std::this_thread::get_id());
}

TEST(ProgressTest, CancelledWriteLeavesNoWeights) {
  testing::TempDir dir;
  std::vector<Report> reports;
  absl::Status s = WriteRandomCheckpoint(Tiny(), dir.path(), Recorder(&reports, "weights"));
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("weights"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.tmp"));
  EXPECT_FALSE(Checkpoint::Open(dir.path()).ok());
}

TEST(ProgressTest, OpeningACheckpointReportsFilesThenTensors) {
  testing::TempDir dir;
  RandomCheckpointSpec spec = Tiny();
  spec.max_shard_bytes = 64 << 10;  // several shards: several files
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir.path()).ok());
  std::vector<Report> reports;
  auto ckpt = Checkpoint::Open(dir.path(), Recorder(&reports));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_THAT(Stages(reports), ElementsAre("files", "tensors"));
  EXPECT_GT(reports.front().total, 1);  // files
  EXPECT_EQ(reports.back().total, static_cast<int64_t>((*ckpt)->TensorNames().size()));

  reports.clear();
  auto cancelled = Checkpoint::Open(dir.path(), Recorder(&reports, "tensors"));
  EXPECT_TRUE(absl::IsCancelled(cancelled.status())) << cancelled.status();
  EXPECT_EQ(reports.back().stage, "tensors");
  EXPECT_EQ(reports.back().done, 1);
}

void WriteGenerationConfig(const testing::TempDir& dir, const std::string& json) {
  std::ofstream(dir / "generation_config.json") << json;
}

TEST(ProgressTest, GenerationConfigIsReadWithTheCheckpoint) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(Tiny(), dir.path()).ok());
  {
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_TRUE((*ckpt)->has_generation_config());  // mkmodel writes the eos ids
    EXPECT_FALSE((*ckpt)->generation_config().do_sample.has_value());
  }
  WriteGenerationConfig(dir, R"({"do_sample": true, "top_p": 0.8, "eos_token_id": [2, 7], "num_beams": 1})");
  {
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const GenerationConfig& g = (*ckpt)->generation_config();
    EXPECT_EQ(g.do_sample, true);
    EXPECT_EQ(g.top_p, 0.8);
    EXPECT_THAT(g.eos_token_ids, ElementsAre(2, 7));
  }
  WriteGenerationConfig(dir, R"({"max_new_tokens": "lots"})");
  auto bad = Checkpoint::Open(dir.path());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(dir / "generation_config.json"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("max_new_tokens"));
  std::filesystem::remove(dir / "generation_config.json");
  auto none = Checkpoint::Open(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)->has_generation_config());
}

}  // namespace
}  // namespace kvtier
