// RunRecord and RunOutput (run_output.h).
#include "run_output.h"

#include <cstdio>

#include "absl/strings/str_join.h"
#include "sampling_flags.h"

namespace kvtier::cli {
namespace {

std::string Quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void PrintJson(const RunRecord& out, bool text, const nlohmann::json& stats, int32_t logprobs, int32_t prompt_logprobs,
               kvt_context* context) {
  nlohmann::json j;
  j["sequences"] = nlohmann::json::array();
  for (int64_t id : out.ids) {
    auto tokens = out.tokens.find(id);
    auto finish = out.finish.find(id);
    nlohmann::json entry = {
        {"id", id},
        {"tokens", tokens == out.tokens.end() ? std::vector<int32_t>{} : tokens->second},
        {"finish_reason", FinishName(finish == out.finish.end() ? KVT_FINISH_REASON_NONE : finish->second)}};
    if (text) entry["text"] = out.texts.count(id) ? out.texts.at(id) : "";
    if (logprobs >= 0) entry["logprobs"] = out.logprobs.count(id) ? out.logprobs.at(id) : nlohmann::json::array();
    if (prompt_logprobs >= 0) {
      auto prompt = out.prompts.find(id);
      const nlohmann::json scored =
          prompt != out.prompts.end()
              ? PromptLogprobsJson(context, id, prompt->second.data(), static_cast<int32_t>(prompt->second.size()))
              : PromptLogprobsJson(context, id, nullptr, 0);
      if (!scored.is_null()) entry["prompt_logprobs"] = scored;
    }
    j["sequences"].push_back(entry);
  }
  j["stats"] = stats;
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void PrintSummary(const RunRecord& out, bool text, const nlohmann::json& stats) {
  std::printf("\n");
  for (int64_t id : out.ids) {
    auto finish = out.finish.find(id);
    const char* reason = FinishName(finish == out.finish.end() ? KVT_FINISH_REASON_NONE : finish->second);
    const std::string body = text ? Quoted(out.Shown(id, true)) : out.Shown(id, false);
    std::printf("seq %lld [%s]: %s\n", static_cast<long long>(id), reason, body.c_str());
  }
  std::printf("\n%-6s %16s %16s %16s\n", "tier", "capacity_bytes", "used_bytes", "peak_bytes");
  for (const char* tier : {"gpu", "host", "disk"}) {
    const auto& t = stats["tiers"][tier];
    std::printf("%-6s %16lld %16lld %16lld\n", tier, t["capacity_bytes"].get<long long>(),
                t["used_bytes"].get<long long>(), t["peak_bytes"].get<long long>());
  }
  std::printf("\nsteps %lld, generated %lld tokens, prompt tokens computed %lld, preemptions %lld, "
              "swaps out/in %lld/%lld, prefix hits gpu/host/disk %lld/%lld/%lld, gpu allocs after init %lld\n",
              stats["steps"].get<long long>(), stats["generated_tokens"].get<long long>(),
              stats["prompt_tokens_computed"].get<long long>(), stats["preemptions"].get<long long>(),
              stats["swaps_out"].get<long long>(), stats["swaps_in"].get<long long>(),
              stats["prefix_hits"]["gpu"].get<long long>(), stats["prefix_hits"]["host"].get<long long>(),
              stats["prefix_hits"]["disk"].get<long long>(), stats["gpu_allocs_after_init"].get<long long>());
}

// Event i of a step, read whole.
struct Event {
  int64_t seq = 0;
  int32_t token = KVT_NO_TOKEN;
  int32_t reason = KVT_FINISH_REASON_NONE;
  std::string piece;
  nlohmann::json logprobs;  // null when the request asked for none
};

Event ReadEvent(const kvt_events* events, int32_t i) {
  Event e;
  kvt_events_get(events, i, &e.seq, &e.token, &e.reason);
  const char* piece = nullptr;
  int32_t piece_len = 0;
  kvt_events_text(events, i, &piece, &piece_len);
  e.piece.assign(piece, static_cast<size_t>(piece_len));
  if (e.token != KVT_NO_TOKEN) e.logprobs = EventLogprobsJson(events, i, e.token);
  return e;
}

}  // namespace

const char* FinishName(int32_t reason) {
  switch (reason) {
    case KVT_FINISH_REASON_STOP: return "stop";
    case KVT_FINISH_REASON_LENGTH: return "length";
    case KVT_FINISH_REASON_CANCELLED: return "cancelled";
    case KVT_FINISH_REASON_ERROR: return "error";
    case KVT_FINISH_REASON_GRAMMAR: return "grammar";
    default: return "none";
  }
}

void RunRecord::Record(const kvt_events* events) {
  for (int32_t i = 0; i < kvt_events_count(events); ++i) {
    Event e = ReadEvent(events, i);
    if (e.token != KVT_NO_TOKEN) tokens[e.seq].push_back(e.token);
    if (!e.logprobs.is_null()) logprobs[e.seq].push_back(std::move(e.logprobs));
    texts[e.seq] += e.piece;
    if (e.reason != KVT_FINISH_REASON_NONE) finish[e.seq] = e.reason;
  }
}

std::string RunRecord::Shown(int64_t id, bool text) const {
  if (text) {
    auto it = texts.find(id);
    return it == texts.end() ? "" : it->second;
  }
  auto it = tokens.find(id);
  return it == tokens.end() ? "" : absl::StrJoin(it->second, " ");
}

RunOutput::RunOutput(RunView view, bool text, const std::vector<int64_t>& ids, std::map<int64_t, std::string> prompts)
    : view_(view), text_(text) {
  if (view == RunView::kLive || (view == RunView::kText && ids.size() > 1)) live_.emplace(ids, std::move(prompts));
}

void RunOutput::PrintEvents(const kvt_events* events) const {
  for (int32_t i = 0; i < kvt_events_count(events); ++i) {
    const Event e = ReadEvent(events, i);
    const long long id = static_cast<long long>(e.seq);
    if (text_ && !e.piece.empty()) {
      std::printf("seq %lld: %s\n", id, Quoted(e.piece).c_str());
    } else if (e.token != KVT_NO_TOKEN) {
      std::printf("seq %lld: token %d\n", id, e.token);
    }
    if (!e.logprobs.is_null()) {
      std::printf("seq %lld: logprob %.6f, top %s\n", id, e.logprobs["logprob"].get<double>(),
                  e.logprobs["top"].dump().c_str());
    }
    if (e.reason != KVT_FINISH_REASON_NONE) std::printf("seq %lld: finished (%s)\n", id, FinishName(e.reason));
  }
}

void RunOutput::AfterStep(const kvt_events* events, const RunRecord& record) {
  if (view_ == RunView::kEvents) {
    PrintEvents(events);
  } else if (live_) {
    std::map<int64_t, std::string> shown, finished;
    for (int64_t id : record.ids) shown[id] = record.Shown(id, text_);
    for (const auto& [id, reason] : record.finish) finished[id] = FinishName(reason);
    live_->Update(shown, finished);
  } else if (view_ == RunView::kText && !record.ids.empty()) {
    const std::string so_far = record.Shown(record.ids.front(), text_);
    if (so_far.size() > streamed_) {
      std::fwrite(so_far.data() + streamed_, 1, so_far.size() - streamed_, stdout);
      streamed_ = so_far.size();
    }
  }
  std::fflush(stdout);  // a reader sees each step as it happens
}

void RunOutput::Finish(const RunRecord& record, const nlohmann::json& stats, int32_t logprobs,
                       int32_t prompt_logprobs, kvt_context* context) {
  switch (view_) {
    case RunView::kJson: PrintJson(record, text_, stats, logprobs, prompt_logprobs, context); break;
    case RunView::kEvents: PrintSummary(record, text_, stats); break;
    case RunView::kLive: LiveView::PrintTiers(stats); break;
    case RunView::kText:
      if (!live_) std::printf("\n");  // the streamed text's line ends
      break;
  }
  std::fflush(stdout);
}

}  // namespace kvtier::cli
