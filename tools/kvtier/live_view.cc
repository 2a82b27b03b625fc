// The live view of `kvtier run --live` (live_view.h).
#include "live_view.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

namespace kvtier::cli {
namespace {

size_t TerminalWidth() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 100;
}

// One display line: newlines and tabs become spaces, control bytes are dropped.
std::string Flatten(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n' || c == '\t' || c == '\r') {
      out += ' ';
    } else if (u >= 0x20 && u != 0x7f) {
      out += c;
    }
  }
  return out;
}

// The last `width` characters (UTF-8 aware: a cut never splits a character).
std::string Tail(const std::string& text, size_t width) {
  size_t chars = 0;
  size_t start = text.size();
  while (start > 0) {
    size_t prev = start - 1;
    while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
    if (++chars > width) break;
    start = prev;
  }
  return start == 0 ? text : "…" + text.substr(start);
}

size_t Chars(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

long long Int(const nlohmann::json& j, const char* key) { return j.value(key, 0LL); }

}  // namespace

LiveView::LiveView(std::vector<int64_t> ids, std::map<int64_t, std::string> prompts)
    : ids_(std::move(ids)), prompts_(std::move(prompts)), terminal_(isatty(STDOUT_FILENO) != 0) {
  // A beginning all prompts share (cut after a space) is shown once, not on every line.
  if (prompts_.size() < 2) return;
  std::string common = prompts_.begin()->second;
  for (const auto& [id, prompt] : prompts_) {
    size_t n = 0;
    while (n < common.size() && n < prompt.size() && common[n] == prompt[n]) ++n;
    common.resize(n);
  }
  const size_t cut = common.rfind(' ');
  if (cut == std::string::npos || cut < 20) return;
  common.resize(cut + 1);
  for (auto& [id, prompt] : prompts_) prompt = "…" + prompt.substr(common.size());
  std::printf("every prompt begins: \"%s\"\n", Flatten(common).c_str());
}

std::string LiveView::Line(int64_t id, const std::string& text, const std::string& finish, size_t width) const {
  const char* mark = finish.empty() ? "   " : finish == "cancelled" || finish == "error" ? " ✗ " : " ✓ ";
  const std::string head = "seq " + std::to_string(id) + mark + "| ";
  auto prompt = prompts_.find(id);
  const std::string body =
      Flatten((prompt != prompts_.end() ? "[" + prompt->second + "]" : std::string()) + text);
  if (width == 0) return head + body;  // plain: the whole text
  const size_t room = width > Chars(head) + 2 ? width - Chars(head) - 2 : 10;
  return head + Tail(body, room);
}

void LiveView::Update(const std::map<int64_t, std::string>& texts, const std::map<int64_t, std::string>& finished) {
  auto text_of = [&](int64_t id) {
    auto it = texts.find(id);
    return it == texts.end() ? std::string() : it->second;
  };
  auto finish_of = [&](int64_t id) {
    auto it = finished.find(id);
    return it == finished.end() ? std::string() : it->second;
  };
  if (!terminal_) {
    for (int64_t id : ids_) {
      const std::string finish = finish_of(id);
      if (finish.empty() || printed_[id]) continue;
      printed_[id] = true;
      std::printf("%s\n", Line(id, text_of(id), finish, 0).c_str());
    }
    std::fflush(stdout);
    return;
  }
  const size_t width = TerminalWidth();
  std::string frame;
  if (drawn_) frame += "\x1b[" + std::to_string(ids_.size()) + "A";  // back to the first line
  for (int64_t id : ids_) frame += "\r\x1b[2K" + Line(id, text_of(id), finish_of(id), width) + "\n";
  drawn_ = true;
  std::fwrite(frame.data(), 1, frame.size(), stdout);
  std::fflush(stdout);
}

void LiveView::PrintTiers(const nlohmann::json& stats) {
  const nlohmann::json& tiers = stats["tiers"];
  std::printf("\n%-6s %12s %12s %12s\n", "tier", "capacity", "peak used", "used now");
  for (const char* tier : {"gpu", "host", "disk"}) {
    const nlohmann::json& t = tiers[tier];
    auto kib = [&](const char* key) { return std::to_string(Int(t, key) / 1024) + " KiB"; };
    std::printf("%-6s %12s %12s %12s\n", tier, kib("capacity_bytes").c_str(), kib("peak_bytes").c_str(),
                kib("used_bytes").c_str());
  }
  const nlohmann::json& hits = stats["prefix_hits"];
  std::printf("\nwhat happened:\n");
  std::printf("  %lld tokens generated in %lld steps; prompt tokens: %lld computed, %lld taken from the cache\n",
              Int(stats, "generated_tokens"), Int(stats, "steps"), Int(stats, "prompt_tokens_computed"),
              Int(stats, "prefix_hit_tokens"));
  std::printf("  GPU blocks ran short: %lld pauses; sequences swapped out %lld times, back in %lld times\n",
              Int(stats, "preemptions"), Int(stats, "swaps_out"), Int(stats, "swaps_in"));
  std::printf("  prompt blocks reused from the cache: %lld from the GPU, %lld from host memory, %lld from disk\n",
              Int(hits, "gpu"), Int(hits, "host"), Int(hits, "disk"));
  if (stats.contains("compute_path")) std::printf("  computed by %s\n", stats["compute_path"].get<std::string>().c_str());
}

}  // namespace kvtier::cli
