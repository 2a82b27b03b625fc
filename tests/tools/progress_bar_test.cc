// The CLI's ProgressBar (tools/kvtier/progress_bar.h): a bar redrawn in place on a
// terminal, plain lines on a pipe.
#include "progress_bar.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What a ProgressBar writes, captured in memory.
class Captured {
 public:
  Captured() : file_(open_memstream(&data_, &size_)) {}
  ~Captured() {
    if (file_ != nullptr) std::fclose(file_);
    std::free(data_);
  }
  FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(data_, size_);
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  FILE* file_;
};

TEST(ProgressBarTest, TerminalRedrawsOneLinePerStage) {
  Captured out;
  {
    ProgressBar bar("loading model", out.file(), /*terminal=*/true);
    bar.Update("tensors", 0, 4);
    bar.Update("tensors", 2, 4);
    bar.Update("tensors", 4, 4);
    bar.Update("weights", 0, 3 << 20);
    bar.Update("weights", 3 << 20, 3 << 20);
    bar.Update("tokenizer", 0, 0);  // nothing to do: not shown
  }
  const std::string text = out.text();
  EXPECT_THAT(text, HasSubstr("\rloading model: tensors   [..............................]   0% 0/4"));
  EXPECT_THAT(text, HasSubstr("\rloading model: tensors   [###############...............]  50% 2/4"));
  EXPECT_THAT(text, HasSubstr("\rloading model: tensors   [##############################] 100% 4/4\033[K\n"));
  EXPECT_THAT(text, HasSubstr("100% 3.0/3.0 MiB\033[K\n"));
  EXPECT_THAT(text, Not(HasSubstr("tokenizer")));
  EXPECT_EQ(text.back(), '\n');  // the destructor ends the last bar's line
}

TEST(ProgressBarTest, PipeGetsOneLinePerQuickStage) {
  Captured out;
  ProgressBar bar("writing /m", out.file(), /*terminal=*/false);
  for (int64_t done = 0; done <= 100; ++done) bar.Update("weights", done << 20, int64_t{100} << 20);
  bar.Update("files", 0, 1);
  bar.Update("files", 1, 1);
  bar.Update("files", 1, 1);  // an end reported twice prints once
  bar.Finish();
  const std::string text = out.text();
  EXPECT_THAT(text, testing::MatchesRegex("writing /m: weights 100\\.0/100\\.0 MiB \\([0-9.]+ s\\)\n"
                                          "writing /m: files 1/1 \\([0-9.]+ s\\)\n"));
}

TEST(ProgressBarTest, PipeGetsQuartersOfASlowStage) {
  Captured out;
  ProgressBar bar("bench W1", out.file(), /*terminal=*/false);
  bar.Update("sequences", 0, 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  for (int64_t done = 1; done <= 8; ++done) bar.Update("sequences", done, 8);
  const std::string text = out.text();
  EXPECT_THAT(text, HasSubstr("bench W1: sequences  12% 1/8\n"));
  EXPECT_THAT(text, HasSubstr("bench W1: sequences  25% 2/8\n"));
  EXPECT_THAT(text, HasSubstr("bench W1: sequences  75% 6/8\n"));
  EXPECT_THAT(text, Not(HasSubstr("37%")));  // one line per quarter
  EXPECT_THAT(text, testing::ContainsRegex("bench W1: sequences 8/8 \\([0-9.]+ s\\)\n$"));
}

TEST(ProgressBarTest, CallbackCancelsOnlyWhenAsked) {
  Captured out;
  ProgressBar bar("x", out.file(), false);
  EXPECT_EQ(ProgressBar::Callback(&bar, "files", 0, 2), 0);
  bool interrupted = false;
  bar.CancelWhen([&interrupted] { return interrupted; });
  EXPECT_EQ(ProgressBar::Callback(&bar, "files", 1, 2), 0);
  interrupted = true;
  EXPECT_NE(ProgressBar::Callback(&bar, "files", 2, 2), 0);
  EXPECT_THAT(out.text(), HasSubstr("x: files 2/2"));  // the report is still shown
}

}  // namespace
}  // namespace kvtier::cli
