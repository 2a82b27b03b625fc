// ProgressBar (progress_bar.h).
#include "progress_bar.h"

#include <unistd.h>

#include <algorithm>

namespace kvtier::cli {
namespace {

constexpr int kBarWidth = 30;
// A terminal is redrawn at most this often (unless the percentage moved or a stage ended),
// so reporting costs nothing next to the work reported.
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
// Pipes: a stage shorter than this prints only its end line.
constexpr auto kQuietStage = std::chrono::seconds(1);

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

ProgressBar::ProgressBar(std::string label, FILE* out) : ProgressBar(std::move(label), out, isatty(fileno(out)) != 0) {}

ProgressBar::ProgressBar(std::string label, FILE* out, bool terminal)
    : label_(std::move(label)), out_(out), terminal_(terminal) {}

ProgressBar::~ProgressBar() { Finish(); }

std::string ProgressBar::Amount(int64_t done, int64_t total) const {
  char text[64];
  if (stage_ == "weights") {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (total >= (int64_t{1} << 30)) {
      std::snprintf(text, sizeof text, "%.2f/%.2f GiB", static_cast<double>(done) / gib, static_cast<double>(total) / gib);
    } else {
      std::snprintf(text, sizeof text, "%.1f/%.1f MiB", static_cast<double>(done) * 1024.0 / gib,
                    static_cast<double>(total) * 1024.0 / gib);
    }
  } else {
    std::snprintf(text, sizeof text, "%lld/%lld", static_cast<long long>(done), static_cast<long long>(total));
  }
  return text;
}

void ProgressBar::Update(const std::string& stage, int64_t done, int64_t total) {
  const auto now = std::chrono::steady_clock::now();
  if (stage != stage_) {
    if (line_open_) std::fputc('\n', out_);
    line_open_ = false;
    stage_ = stage;
    last_quarter_ = -1;
    last_percent_ = -1;
    stage_start_ = now;
  }
  if (total <= 0) return;  // nothing to do in this stage (e.g. no tokenizer to load)
  done = std::clamp<int64_t>(done, 0, total);
  const int percent = static_cast<int>(done * 100 / total);
  const bool end = done >= total;
  if (terminal_) {
    if (!end && percent == last_percent_ && now - last_draw_ < kRedrawInterval) return;
    last_percent_ = percent;
    last_draw_ = now;
    DrawBar(done, total);
    return;
  }
  // Pipes: a stage's end with its time; in a stage that takes a while, each quarter.
  const int quarter = end ? 4 : percent / 25;
  if (quarter == last_quarter_ || (!end && now - stage_start_ < kQuietStage)) return;
  last_quarter_ = quarter;
  if (end) {
    std::fprintf(out_, "%s: %s %s (%.1f s)\n", label_.c_str(), stage_.c_str(), Amount(done, total).c_str(),
                 Seconds(now - stage_start_));
  } else {
    std::fprintf(out_, "%s: %s %3d%% %s\n", label_.c_str(), stage_.c_str(), percent, Amount(done, total).c_str());
  }
  std::fflush(out_);
}

void ProgressBar::DrawBar(int64_t done, int64_t total) {
  const int filled = total > 0 ? static_cast<int>(done * kBarWidth / total) : kBarWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBarWidth - filled), '.');
  const int percent = total > 0 ? static_cast<int>(done * 100 / total) : 100;
  // \r, then the line, then "erase to the end of the line" for a shorter redraw.
  std::fprintf(out_, "\r%s: %-9s [%s] %3d%% %s\033[K", label_.c_str(), stage_.c_str(), bar.c_str(), percent,
               Amount(done, total).c_str());
  std::fflush(out_);
  line_open_ = true;
}

void ProgressBar::Finish() {
  if (line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  line_open_ = false;
}

int32_t ProgressBar::Callback(void* user_data, const char* stage, int64_t done, int64_t total) {
  auto* bar = static_cast<ProgressBar*>(user_data);
  bar->Update(stage, done, total);
  return bar->cancel_ && bar->cancel_() ? 1 : 0;
}

}  // namespace kvtier::cli
