// Implementation of one benchmark run (bench_workload.h).
#include "bench_workload.h"

#include <cstdio>
#include <random>
#include <thread>

#include "context_text.h"
#include "cuda_env.h"
#include "interrupt.h"
#include "progress_bar.h"

namespace kvtier::cli::bench {
namespace {

struct Handles {
  kvt_options* options = nullptr;
  kvt_context* context = nullptr;
  bool owns_context = true;
  kvt_events* events = nullptr;
  std::vector<kvt_request*> requests;
  ~Handles() {
    for (kvt_request* r : requests) kvt_request_free(r);
    kvt_events_free(events);
    if (owns_context) kvt_context_free(context);
    kvt_options_free(options);
  }
};

// Cancels the run's sequences and applies the cancels with one step, so their blocks go
// back to the cache before the context is freed.
void CancelAll(kvt_context* context, kvt_events* events, const std::map<int64_t, int>& ids) {
  for (const auto& [id, produced] : ids) {
    int32_t state = 0, reason = 0;
    if (kvt_sequence_status(context, id, &state, &reason) == KVT_OK && state != KVT_SEQUENCE_STATE_FINISHED) {
      kvt_sequence_cancel(context, id);
    }
  }
  kvt_step(context, events);
}

}  // namespace

double UsdPerMillionOutputTokens(const Row& row, double usd_per_hour) {
  if (row.unit != "tok/s" || row.workload == "W7" || row.figure.find("prefill") != std::string::npos ||
      !(row.value > 0)) {
    return NAN;
  }
  return usd_per_hour / 3600.0 / row.value * 1e6;
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string Fmt(double v, int prec) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

double JsonNum(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return NAN;
    at = &(*at)[key];
  }
  return at->is_number() ? at->get<double>() : NAN;
}

json ContextStats(kvt_context* context) {
  const std::optional<std::string> text = ContextText(context, kvt_context_stats_json);
  if (!text) return json();
  try {
    return json::parse(*text);
  } catch (...) {
    return json();
  }
}

RunResult RunWorkload(kvt_model* model, const WorkloadSpec& w, double time_limit, GpuMemorySampler* sampler,
                      kvt_context* existing) {
  RunResult r;
  if (const int signal_number = InterruptSignal(); signal_number != 0) {
    r.interrupt_signal = signal_number;
    r.error = std::string("not started: interrupted by ") + InterruptName(signal_number);
    return r;
  }
  Handles h;
  char err[2048] = {0};
  if (existing != nullptr) {
    h.context = existing;
    h.owns_context = false;
  }
  kvt_options_create(&h.options);
  if (existing == nullptr && SetCudaOptionsFromEnvironment(h.options) != KVT_OK) {
    r.error = std::string("KVTIER_CUDA_*: ") + kvt_options_errmsg(h.options);
    return r;
  }
  for (const auto& [key, value] : w.options) {
    if (existing != nullptr) break;
    if (kvt_options_set_string(h.options, key.c_str(), value.c_str()) != KVT_OK) {
      r.error = "option " + key + ": " + kvt_options_errmsg(h.options);
      return r;
    }
  }
  if (sampler) sampler->ResetPeaks();
  // Context creation, then the finished sequences, on the progress bar; a signal stops the
  // creation too.
  ProgressBar progress("bench " + w.id);
  progress.CancelWhen([] { return InterruptSignal() != 0; });
  kvt_options_set_progress_callback(h.options, ProgressBar::Callback, &progress);
  const auto t_create = Clock::now();
  if (kvt_status s = existing != nullptr ? KVT_OK : kvt_context_create(model, h.options, &h.context, err, sizeof err);
      s != KVT_OK) {
    if (const int signal_number = InterruptSignal(); s == KVT_ERR_CANCELLED && signal_number != 0) {
      r.interrupt_signal = signal_number;
      r.error = std::string("context creation interrupted by ") + InterruptName(signal_number);
      return r;
    }
    r.error = std::string("context: ") + kvt_status_string(s) + ": " + err;
    return r;
  }
  if (existing == nullptr) r.context_create_s = Seconds(t_create, Clock::now());
  const int32_t vocab = kvt_model_vocab_size(model);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(1, vocab - 1);
  // Warm-up: one short sequence (kernels, cuBLAS heuristics, graphs) before timing.
  if (w.warmup) {
    kvt_request* warm = nullptr;
    kvt_request_create(&warm);
    std::vector<int32_t> p(16);
    for (auto& t : p) t = dist(rng);
    kvt_request_set_prompt_tokens(warm, p.data(), 16);
    kvt_request_set_max_new_tokens(warm, 4);
    kvt_request_set_ignore_eos(warm, 1);
    // With a schema, the warm-up compiles it too (later adds hit the cache).
    if (!w.json_schema.empty() && kvt_request_set_json_schema(warm, w.json_schema.c_str()) != KVT_OK) {
      r.error = std::string("json schema: ") + kvt_request_errmsg(warm);
      kvt_request_free(warm);
      return r;
    }
    int32_t buf[8], len = 0;
    kvt_status s = kvt_generate(h.context, warm, buf, 8, &len, nullptr);
    kvt_request_free(warm);
    if (s != KVT_OK) {
      r.error = std::string("warm-up: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context);
      return r;
    }
  }
  std::vector<std::vector<int32_t>> prompts = w.prompts;
  if (prompts.empty()) {
    prompts.assign(w.num_seqs, std::vector<int32_t>(w.prompt));
    for (auto& p : prompts)
      for (auto& t : p) t = dist(rng);
  }
  for (int i = 0; i < w.num_seqs; ++i) {
    kvt_request* req = nullptr;
    kvt_request_create(&req);
    h.requests.push_back(req);
    kvt_request_set_prompt_tokens(req, prompts[i].data(), static_cast<int32_t>(prompts[i].size()));
    kvt_request_set_max_new_tokens(req, w.gen);
    kvt_request_set_ignore_eos(req, 1);
    if (w.sampler_controls) {
      const int32_t bias_tokens[3] = {1, 2, 3};
      const float biases[3] = {1.5f, -2.0f, -100.0f};
      kvt_request_set_logprobs(req, 5);
      kvt_request_set_repetition_penalty(req, 1.1f);
      kvt_request_set_presence_penalty(req, 0.2f);
      kvt_request_set_frequency_penalty(req, 0.2f);
      kvt_request_set_logit_bias(req, bias_tokens, biases, 3);
    }
    if (!w.json_schema.empty()) kvt_request_set_json_schema(req, w.json_schema.c_str());
  }
  kvt_events_create(&h.events);
  std::map<int64_t, int> produced;
  const auto t0 = Clock::now();
  for (kvt_request* req : h.requests) {
    int64_t id = 0;
    if (kvt_status s = kvt_sequence_add(h.context, req, &id); s != KVT_OK) {
      r.error = std::string("add: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context);
      return r;
    }
    produced[id] = 0;
  }
  bool have_first = false, have_all_first = false;
  int with_first = 0;
  Clock::time_point t_all_first = t0;
  int64_t errors = 0;
  int finished = 0;
  progress.Update("sequences", 0, w.num_seqs);
  while (kvt_context_num_unfinished(h.context) > 0) {
    if (const int signal_number = InterruptSignal(); signal_number != 0) {
      CancelAll(h.context, h.events, produced);
      r.interrupt_signal = signal_number;
      r.error = std::string("interrupted by ") + InterruptName(signal_number);
      r.wall_s = Seconds(t0, Clock::now());
      return r;
    }
    const auto step_start = Clock::now();
    if (kvt_status s = kvt_step(h.context, h.events); s != KVT_OK) {
      r.error = std::string("step: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context);
      return r;
    }
    ++r.steps;
    const auto now = Clock::now();
    if (!have_all_first) r.prefill_step_s.push_back(Seconds(step_start, now));
    for (int32_t i = 0; i < kvt_events_count(h.events); ++i) {
      int64_t seq = 0;
      int32_t token = 0, reason = 0;
      kvt_events_get(h.events, i, &seq, &token, &reason);
      if (reason == KVT_FINISH_REASON_ERROR || reason == KVT_FINISH_REASON_CANCELLED) ++errors;
      if (reason == KVT_FINISH_REASON_GRAMMAR) ++r.grammar_finished;
      if (reason != KVT_FINISH_REASON_NONE) progress.Update("sequences", ++finished, w.num_seqs);
      if (token == KVT_NO_TOKEN) continue;
      if (w.sampler_controls) {  // read as a consumer would
        float logprob = 0, top_logprobs[5];
        int32_t num_top = 0, top_tokens[5], n = 0;
        if (kvt_events_logprob(h.events, i, &logprob, &num_top) != KVT_OK ||
            kvt_events_top_logprobs(h.events, i, top_tokens, top_logprobs, 5, &n) != KVT_OK || n != 5) {
          ++errors;
        }
      }
      ++r.generated;
      if (have_all_first) ++r.decode_tokens;
      if (produced[seq]++ == 0) {
        r.mean_ttft_s += Seconds(t0, now) / w.num_seqs;
        if (!have_first) {
          have_first = true;
          r.ttft_s = Seconds(t0, now);
        }
        if (++with_first == w.num_seqs) {
          have_all_first = true;
          t_all_first = now;
        }
      }
    }
    if (Seconds(t0, now) > time_limit) {
      char msg[256];
      std::snprintf(msg, sizeof msg, "time limit %.0f s reached after %lld steps, %lld tokens (%d/%d sequences started)",
                    time_limit, static_cast<long long>(r.steps), static_cast<long long>(r.generated), with_first,
                    w.num_seqs);
      r.error = msg;
      r.wall_s = Seconds(t0, now);
      return r;
    }
  }
  const auto t_end = Clock::now();
  r.wall_s = Seconds(t0, t_end);
  r.all_first_s = Seconds(t0, t_all_first);
  r.decode_s = Seconds(t_all_first, t_end);
  r.stats = ContextStats(h.context);
  if (sampler) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // one more sample
    r.peak_process_mib = sampler->peak_process_mib();
    r.peak_device_mib = sampler->peak_device_mib();
  }
  if (errors > 0) {
    r.error = std::to_string(errors) + " sequences ended in error/cancel";
    return r;
  }
  // A constrained sequence may complete its schema before w.gen tokens.
  r.ok = r.generated == static_cast<int64_t>(w.num_seqs) * w.gen || (!w.json_schema.empty() && r.generated > 0);
  if (!r.ok) r.error = "generated " + std::to_string(r.generated) + " tokens, expected " + std::to_string(w.num_seqs * w.gen);
  return r;
}

}  // namespace kvtier::cli::bench
