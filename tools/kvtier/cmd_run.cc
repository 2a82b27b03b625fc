// `kvtier run`: generates for every prompt through the public C API (the CLI is a user of
// the library like any other), showing the output as it comes (run_output.h) and, with
// --metrics, writing the statistics in the Prometheus text format. Loading shows its progress on
// stderr. SIGINT or SIGTERM cancels the load or the sequences and frees the context, which
// saves the disk cache, before exiting with 128 + the signal number. Runs once per process;
// not thread-safe.
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "command_line.h"
#include "context_flags.h"
#include "context_text.h"
#include "cuda_env.h"
#include "interrupt.h"
#include "kvtier/kvtier.h"
#include "nlohmann/json.hpp"
#include "numbers.h"
#include "progress_bar.h"
#include "run_output.h"
#include "sampling_flags.h"

namespace kvtier::cli {
namespace {

constexpr char kRunDescription[] =
    "Generates for every prompt (one sequence each, all at once) and prints the output as it\n"
    "comes: text when the model has a tokenizer (tokenizer.json, or a GGUF file's), token ids\n"
    "otherwise; one sequence's straight to stdout, several as one line each (redrawn in place on\n"
    "a terminal, printed when each finishes when piped). --events, --json and --live show more.\n"
    "SIGINT or SIGTERM cancels the sequences and frees the context (saving the disk cache) before\n"
    "exiting. Sampling flags not given take the model's defaults (generation_config.json or a\n"
    "GGUF file's; see kvtier inspect), else 16 tokens, greedy, no filters.";

struct RunFlags {
  std::string model;
  std::vector<std::string> prompt_ids, prompts, stops;
  std::vector<int32_t> stop_ids;
  bool chat = false, ignore_eos = false, json = false, live = false, events = false;
  // Set on the request only when given (Given): the others keep the model's defaults.
  int32_t max_tokens = 16, top_k = 0;
  double temperature = 0, top_p = 1;
  int64_t seed = 0;
  std::string cache_namespace;
  std::string metrics;  // --metrics FILE ("-": stdout); empty: none
  SamplingFlags sampling;
  // Structured output: the files' paths, then their text (read after parsing).
  std::string json_schema_file, grammar_file, json_schema, grammar;
  ContextFlags context;
  const CLI::App* app = nullptr;  // for Given
  bool Given(const char* flag) const { return app->count(flag) > 0; }
};

void AddFlags(CommandLine* cl, RunFlags* f) {
  cl->AddString("--model", &f->model, "HF checkpoint directory (config.json + safetensors) or GGUF file", "DIR|FILE")->required();
  CommandLine::Normalized(
      cl->AddStrings("--prompt-ids", &f->prompt_ids, "comma-separated token ids; repeat for more sequences", "LIST"),
      [](absl::string_view text) -> absl::StatusOr<std::string> {
        auto ids = ParseTokenIds(text);
        if (!ids.ok()) return ids.status();
        return std::string(text);
      });
  cl->AddStrings("--prompt", &f->prompts, "a text prompt (needs the model's tokenizer); repeatable", "TEXT");
  cl->AddSwitch("--chat", &f->chat, "wrap each --prompt as a user message in the model's chat format");
  cl->AddStrings("--stop", &f->stops, "stop string (repeatable; needs the model's tokenizer)", "TEXT");
  cl->AddInt("--max-tokens", &f->max_tokens, 1, INT32_MAX, "new tokens per sequence (default: the model's)");
  cl->AddReal("--temperature", &f->temperature, 0, 3.4e38, "0 = greedy (default: the model's)", false, "T");
  cl->AddInt("--top-k", &f->top_k, 0, INT32_MAX, "sample among the K most likely tokens, 0 = off (default: the model's)",
             "K");
  cl->AddReal("--top-p", &f->top_p, 0, 1, "nucleus sampling threshold, 1 = off (default: the model's)", true, "P");
  cl->AddInt("--seed", &f->seed, 0, INT64_MAX, "seed base: sequence i uses S+i (default 0)", "S");
  cl->AddInts("--stop-id", &f->stop_ids, 0, INT32_MAX, "extra stop token (repeatable)", "ID");
  cl->AddSwitch("--ignore-eos", &f->ignore_eos, "do not stop at the model's eos ids");
  cl->AddString("--cache-namespace", &f->cache_namespace, "share cached prompt prefixes only within NS (default \"\")",
                "NS");
  cl->AddSwitch("--json", &f->json, "print one JSON object: sequences (tokens, text, logprobs) and stats");
  cl->AddSwitch("--live", &f->live,
                "one line per sequence, redrawn as it grows on a terminal (plain lines at the end when piped), "
                "then the tiers and what the cache did");
  cl->AddSwitch("--events", &f->events,
                "one line per step event (each piece or token, its log-probabilities, each finish), then every "
                "sequence's output, the tiers and the statistics");
  cl->AddString("--metrics", &f->metrics,
                "write the statistics in the Prometheus text format to FILE (\"-\": stdout) when done", "FILE");
  f->sampling.AddTo(cl);
  cl->AddString("--json-schema", &f->json_schema_file,
                "constrain every output to JSON valid against the JSON schema in FILE", "FILE");
  cl->AddString("--grammar", &f->grammar_file, "constrain every output to the GBNF grammar in FILE (llama.cpp syntax)",
                "FILE");
  f->context.AddTo(cl);
  f->app = &cl->app();
}

// Releases every handle it holds when the command returns, whatever the path.
struct RunHandles {
  kvt_model* model = nullptr;
  kvt_options* options = nullptr;
  kvt_context* context = nullptr;
  kvt_events* events = nullptr;
  std::vector<kvt_request*> requests;
  ~RunHandles() {
    for (kvt_request* r : requests) kvt_request_free(r);
    kvt_events_free(events);
    kvt_context_free(context);
    kvt_options_free(options);
    kvt_model_free(model);
  }
};

// Exit status for a failed library call: the library refusing a value the command line gave
// is a usage error; anything else is a failure.
int StatusFor(kvt_status status) { return status == KVT_ERR_INVALID_ARGUMENT ? kExitUsage : kExitFailure; }

// The context's statistics in the Prometheus text format, to path ("-": stdout).
bool WriteMetrics(kvt_context* context, const std::string& path) {
  const std::optional<std::string> metrics = ContextText(context, kvt_context_metrics_text);
  if (!metrics) return false;
  const std::string& text = *metrics;
  FILE* out = path == "-" ? stdout : std::fopen(path.c_str(), "w");
  if (out == nullptr) return false;
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  return (path == "-" ? std::fflush(out) == 0 : std::fclose(out) == 0) && written;
}

nlohmann::json Stats(kvt_context* context) {
  const std::optional<std::string> text = ContextText(context, kvt_context_stats_json);
  return text ? nlohmann::json::parse(*text) : nlohmann::json::object();
}

// Builds request i from the flags; "" or the failure. *prompt_ids gets the prompt's token
// ids when the CLI knows them (token ids, or text tokenized as the request will be).
std::string MakeRequest(const RunFlags& f, size_t i, kvt_model* model, kvt_request* r,
                        std::vector<int32_t>* prompt_ids) {
  kvt_status s = KVT_OK;
  if (i < f.prompt_ids.size()) {
    const std::vector<int32_t> prompt = *ParseTokenIds(f.prompt_ids[i]);  // validated by the parser
    s = kvt_request_set_prompt_tokens(r, prompt.data(), static_cast<int32_t>(prompt.size()));
    *prompt_ids = prompt;
  } else {
    const std::string& p = f.prompts[i - f.prompt_ids.size()];
    s = f.chat ? kvt_request_add_chat_message(r, "user", p.c_str())
               : kvt_request_set_prompt_text(r, p.data(), static_cast<int32_t>(p.size()));
    if (!f.chat && f.sampling.prompt_logprobs >= 0) {  // BOS as the tokenizer adds it, as the request does
      int32_t n = 0;
      kvt_model_tokenize(model, p.data(), static_cast<int32_t>(p.size()), 1, nullptr, 0, &n, nullptr, 0);
      prompt_ids->resize(static_cast<size_t>(n));
      kvt_model_tokenize(model, p.data(), static_cast<int32_t>(p.size()), 1, prompt_ids->data(), n, &n, nullptr, 0);
    }
  }
  for (const std::string& stop : f.stops) {
    if (s == KVT_OK) s = kvt_request_add_stop_string(r, stop.data(), static_cast<int32_t>(stop.size()));
  }
  // Sequence i's seed is S + i, computed without overflow (S <= 2^63-1, i < 2^31).
  const uint64_t seed = static_cast<uint64_t>(f.seed) + i;
  // Only the sampling flags given: the others keep the model's defaults (generation_config.json).
  if (s == KVT_OK && f.Given("--max-tokens")) s = kvt_request_set_max_new_tokens(r, f.max_tokens);
  if (s == KVT_OK && f.Given("--temperature")) s = kvt_request_set_temperature(r, static_cast<float>(f.temperature));
  if (s == KVT_OK && f.Given("--top-k")) s = kvt_request_set_top_k(r, f.top_k);
  if (s == KVT_OK && f.Given("--top-p")) s = kvt_request_set_top_p(r, static_cast<float>(f.top_p));
  if (s == KVT_OK) s = kvt_request_set_seed(r, static_cast<int64_t>(seed));
  if (s == KVT_OK) s = kvt_request_set_stop_tokens(r, f.stop_ids.data(), static_cast<int32_t>(f.stop_ids.size()));
  if (s == KVT_OK) s = kvt_request_set_ignore_eos(r, f.ignore_eos ? 1 : 0);
  if (s == KVT_OK) s = kvt_request_set_cache_namespace(r, f.cache_namespace.c_str());
  if (s == KVT_OK && !f.json_schema_file.empty()) s = kvt_request_set_json_schema(r, f.json_schema.c_str());
  if (s == KVT_OK && !f.grammar_file.empty()) s = kvt_request_set_grammar(r, f.grammar.c_str());
  if (s != KVT_OK) return kvt_request_errmsg(r);
  return f.sampling.Apply(r, [&](const char* flag) { return f.Given(flag); });
}

// Cancels every unfinished sequence and applies the cancels with one step (their blocks go
// back to the cache, which kvt_context_free then saves); false when that step failed.
bool CancelAll(RunHandles* h, RunRecord* out) {
  for (int64_t id : out->ids) {
    int32_t state = 0, reason = 0;
    if (kvt_sequence_status(h->context, id, &state, &reason) == KVT_OK && state != KVT_SEQUENCE_STATE_FINISHED) {
      kvt_sequence_cancel(h->context, id);
    }
  }
  if (kvt_step(h->context, h->events) != KVT_OK) return false;
  out->Record(h->events);
  return true;
}

// The exit for a signal caught before any sequence exists: nothing to cancel or save.
int Interrupted(const CommandLine& cl, const char* during) {
  const int signal_number = InterruptSignal();
  return cl.Fail(InterruptExitStatus(signal_number),
                 absl::StrCat("interrupted by ", InterruptName(signal_number), " while ", during));
}

int RunMain(int argc, char** argv) {
  CommandLine cl("run", kRunDescription);
  RunFlags f;
  AddFlags(&cl, &f);
  if (auto status = cl.Parse(argc, argv)) return *status;
  if (f.prompt_ids.empty() && f.prompts.empty()) return cl.UsageError("give at least one --prompt-ids or --prompt");
  if (int{f.live} + int{f.json} + int{f.events} > 1) {
    return cl.UsageError("give at most one of --live, --json and --events");
  }
  for (const auto& [flag, path, text] : {std::tuple<const char*, const std::string*, std::string*>{
                                             "--json-schema", &f.json_schema_file, &f.json_schema},
                                         {"--grammar", &f.grammar_file, &f.grammar}}) {
    if (path->empty()) continue;
    std::ifstream in(*path, std::ios::binary);
    std::stringstream content;
    content << in.rdbuf();
    if (!in) return cl.UsageError(absl::StrCat(flag, ": cannot read ", *path));
    *text = content.str();
  }
  InstallInterruptHandlers();

  RunHandles h;
  char err[1024];
  // Loading and context creation report to the bar, and stop early on a signal.
  ProgressBar loading("loading model");
  loading.CancelWhen([] { return InterruptSignal() != 0; });
  if (kvt_status s = kvt_model_load_with_progress(f.model.c_str(), ProgressBar::Callback, &loading, &h.model, err,
                                                  sizeof err);
      s != KVT_OK) {
    loading.Finish();
    if (s == KVT_ERR_CANCELLED && InterruptSignal() != 0) return Interrupted(cl, "loading the model");
    return cl.Fail(kExitFailure, absl::StrCat(kvt_status_string(s), ": ", err));
  }
  kvt_options_create(&h.options);
  if (SetCudaOptionsFromEnvironment(h.options) != KVT_OK) {
    return cl.Fail(kExitUsage, absl::StrCat("KVTIER_CUDA_*: ", kvt_options_errmsg(h.options)));
  }
  if (std::string error = f.context.Apply(h.options); !error.empty()) return cl.Fail(kExitUsage, error);
  kvt_options_set_progress_callback(h.options, ProgressBar::Callback, &loading);
  if (kvt_status s = kvt_context_create(h.model, h.options, &h.context, err, sizeof err); s != KVT_OK) {
    loading.Finish();
    if (s == KVT_ERR_CANCELLED && InterruptSignal() != 0) return Interrupted(cl, "creating the context");
    return cl.Fail(StatusFor(s), absl::StrCat(kvt_status_string(s), ": ", ContextFlags::InFlagTerms(err)));
  }
  loading.Finish();
  // Which path computes (e.g. the CPU's quantized kernels or its fp32 reference).
  if (const nlohmann::json stats = Stats(h.context); stats.contains("compute_path")) {
    std::fprintf(stderr, "kvtier run: %s\n", stats["compute_path"].get<std::string>().c_str());
  }

  RunRecord out;
  const bool text = kvt_model_has_tokenizer(h.model) != 0;
  for (size_t i = 0; i < f.prompt_ids.size() + f.prompts.size(); ++i) {
    kvt_request* r = nullptr;
    kvt_request_create(&r);
    h.requests.push_back(r);
    std::vector<int32_t> prompt_ids;
    if (std::string error = MakeRequest(f, i, h.model, r, &prompt_ids); !error.empty()) {
      return cl.Fail(kExitUsage, absl::StrCat("sequence ", i, ": ", error));
    }
    int64_t id = 0;
    if (kvt_status s = kvt_sequence_add(h.context, r, &id); s != KVT_OK) {
      return cl.Fail(StatusFor(s), absl::StrCat("sequence ", i, ": ", kvt_status_string(s), ": ",
                                                ContextFlags::InFlagTerms(kvt_context_errmsg(h.context))));
    }
    // --n: the prompt's completions have the ids that follow the first.
    for (int32_t c = 0; c < f.sampling.n; ++c) out.ids.push_back(id + c);
    if (!prompt_ids.empty()) out.prompts[id] = std::move(prompt_ids);
  }

  kvt_events_create(&h.events);
  std::map<int64_t, std::string> shown_prompts;  // each text prompt before its continuation
  for (size_t i = 0; i < f.prompts.size() && f.sampling.n == 1; ++i) {
    shown_prompts[out.ids[f.prompt_ids.size() + i]] = f.prompts[i];
  }
  const RunView view = f.json ? RunView::kJson : f.live ? RunView::kLive : f.events ? RunView::kEvents : RunView::kText;
  RunOutput output(view, text, out.ids, std::move(shown_prompts));
  int signal_number = 0;
  while (kvt_context_num_unfinished(h.context) > 0) {
    if ((signal_number = InterruptSignal()) != 0) {
      if (CancelAll(&h, &out)) output.AfterStep(h.events, out);
      break;
    }
    if (kvt_status s = kvt_step(h.context, h.events); s != KVT_OK) {
      return cl.Fail(kExitFailure, absl::StrCat("step failed: ", kvt_status_string(s), ": ",
                                                ContextFlags::InFlagTerms(kvt_context_errmsg(h.context))));
    }
    out.Record(h.events);
    output.AfterStep(h.events, out);
  }
  const nlohmann::json stats = Stats(h.context);
  if (!f.metrics.empty() && !WriteMetrics(h.context, f.metrics)) {
    return cl.Fail(kExitFailure, absl::StrCat("--metrics: cannot write ", f.metrics));
  }
  output.Finish(out, stats, f.sampling.logprobs, f.sampling.prompt_logprobs, h.context);
  if (signal_number == 0) signal_number = InterruptSignal();
  if (signal_number != 0) {
    kvt_context_free(h.context);  // saves the cached blocks and the disk index
    h.context = nullptr;
    const std::string disk = f.context.Get("disk_kv_bytes");
    const bool disk_tier = !disk.empty() && disk != "0";
    return cl.Fail(InterruptExitStatus(signal_number),
                   absl::StrCat("interrupted by ", InterruptName(signal_number), ": sequences cancelled, context freed",
                                disk_tier ? " (disk cache saved)" : ""));
  }
  return kExitOk;
}

}  // namespace

KVTIER_REGISTER_COMMAND("run", "generate from token ids or text (every context option as a flag)", RunMain);

}  // namespace kvtier::cli
