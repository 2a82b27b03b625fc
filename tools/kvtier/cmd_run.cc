// `kvtier run`: generates from token ids through the public C API (the CLI is a user of
// the library like any other), printing tokens as they stream and the statistics.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "args.h"
#include "command.h"
#include "cuda_env.h"
#include "kvtier/kvtier.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

constexpr char kUsage[] = R"(usage: kvtier run --model DIR (--prompt-ids 1,2,3 | --prompt TEXT)... [flags]

Generates for every prompt (one sequence each, all at once) and streams the output: text
when the model has a tokenizer.json, token ids otherwise.
  --model DIR              HF checkpoint directory (config.json + safetensors)
  --prompt-ids LIST        comma-separated token ids; repeat for more sequences
  --prompt TEXT            a text prompt (needs tokenizer.json); repeatable
  --chat                   wrap each --prompt as a user message in the model's chat format
  --stop TEXT              stop string (repeatable; needs tokenizer.json)
  --max-tokens N           new tokens per sequence (default 16)
  --temperature T          0 = greedy (default 0)
  --top-k K / --top-p P    sampling filters (default off)
  --seed S                 per-sequence seed base; sequence i uses S+i (default 0)
  --stop-id ID             extra stop token (repeatable)
  --ignore-eos             do not stop at the model's eos ids
  --backend auto|cpu|cuda  (default auto)
  --threads N              CPU threads, 0 = all (default 0)
  --gpu-kv-bytes SIZE      device-tier KV budget, e.g. 64MiB (default 256MiB)
  --host-kv-bytes SIZE     host-tier KV budget (default 0)
  --disk-kv-bytes SIZE     disk-tier KV budget (default 0)
  --disk-path FILE         file backing the disk tier
  --block-tokens N         tokens per KV block (default 16)
  --max-tokens-per-step N  token budget of one step (default 512)
  --max-running N          sequences per batch (default 256)
  --preemption MODE        auto|swap|recompute (default auto)
  --json                   print one JSON object: sequences (tokens, text) and stats
  --json-schema FILE       constrain every output to JSON valid against this schema
  --grammar FILE           constrain every output to this GBNF grammar (llama.cpp syntax)
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "kvtier run: %s\n", message.c_str());
  return 1;
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError("--prompt-ids: '" + std::string(part) + "' is not a token id");
    }
    ids.push_back(id);
  }
  return ids;
}

// Releases every handle it holds when the command returns, whatever the path.
struct Handles {
  kvt_model* model = nullptr;
  kvt_options* options = nullptr;
  kvt_context* context = nullptr;
  kvt_events* events = nullptr;
  std::vector<kvt_request*> requests;
  ~Handles() {
    for (kvt_request* r : requests) kvt_request_free(r);
    kvt_events_free(events);
    kvt_context_free(context);
    kvt_options_free(options);
    kvt_model_free(model);
  }
};

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

int RunMain(int argc, char** argv) {
  auto args = Args::Parse(argc, argv,
                          {"model", "prompt-ids", "prompt", "stop", "max-tokens", "temperature", "top-k", "top-p", "seed", "stop-id",
                           "backend", "threads", "gpu-kv-bytes", "host-kv-bytes", "disk-kv-bytes", "disk-path",
                           "block-tokens", "max-tokens-per-step", "max-running", "preemption", "json-schema", "grammar"},
                          {"json", "ignore-eos", "help", "chat"});
  if (!args.ok()) {
    std::fprintf(stderr, "kvtier run: %s\n\n%s", std::string(args.status().message()).c_str(), kUsage);
    return 2;
  }
  if (args->Has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!args->Has("model") || (!args->Has("prompt-ids") && !args->Has("prompt"))) {
    std::fprintf(stderr, "kvtier run: --model and --prompt-ids or --prompt are required\n\n%s", kUsage);
    return 2;
  }
  const bool json = args->Has("json");
  Handles h;
  char err[1024];
  if (kvt_status s = kvt_model_load(args->Get("model")->c_str(), &h.model, err, sizeof err); s != KVT_OK) {
    return Fail(std::string(kvt_status_string(s)) + ": " + err);
  }
  kvt_options_create(&h.options);
  if (SetCudaOptionsFromEnvironment(h.options) != KVT_OK) {
    return Fail(std::string("KVTIER_CUDA_*: ") + kvt_options_errmsg(h.options));
  }
  std::map<std::string, std::string> string_options = {
      {"backend", "backend"}, {"disk-path", "disk_path"}, {"preemption", "preemption"},
      {"gpu-kv-bytes", "gpu_kv_bytes"}, {"host-kv-bytes", "host_kv_bytes"}, {"disk-kv-bytes", "disk_kv_bytes"},
      {"threads", "threads"}, {"block-tokens", "block_tokens"}, {"max-tokens-per-step", "max_tokens_per_step"},
      {"max-running", "max_running"}};
  for (const auto& [flag, key] : string_options) {
    if (auto value = args->Get(flag)) {
      if (kvt_options_set_string(h.options, key.c_str(), value->c_str()) != KVT_OK) {
        return Fail("--" + flag + ": " + kvt_options_errmsg(h.options));
      }
    }
  }
  if (kvt_status s = kvt_context_create(h.model, h.options, &h.context, err, sizeof err); s != KVT_OK) {
    return Fail(std::string(kvt_status_string(s)) + ": " + err);
  }

  auto max_tokens = args->GetInt("max-tokens", 16);
  auto temperature = args->GetDouble("temperature", 0.0);
  auto top_k = args->GetInt("top-k", 0);
  auto top_p = args->GetDouble("top-p", 1.0);
  auto seed = args->GetInt("seed", 0);
  for (const absl::Status& s : {max_tokens.status(), temperature.status(), top_k.status(), top_p.status(), seed.status()}) {
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  std::vector<int32_t> stop_ids;
  for (const std::string& text : args->GetAll("stop-id")) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(text, &id)) return Fail("--stop-id: '" + text + "' is not a token id");
    stop_ids.push_back(id);
  }

  // Structured output: the file's text, given to every request.
  std::string schema_text, grammar_text;
  for (const auto& [flag, text] : {std::pair<const char*, std::string*>{"json-schema", &schema_text}, {"grammar", &grammar_text}}) {
    if (auto path = args->Get(flag)) {
      std::ifstream in(*path, std::ios::binary);
      std::stringstream content;
      content << in.rdbuf();
      if (!in) return Fail(std::string("--") + flag + ": cannot read " + *path);
      *text = content.str();
    }
  }

  std::vector<int64_t> ids;
  std::map<int64_t, std::vector<int32_t>> generated;
  std::map<int64_t, std::string> texts;
  std::map<int64_t, int32_t> finish;
  const std::vector<std::string> id_prompts = args->GetAll("prompt-ids");
  const std::vector<std::string> text_prompts = args->GetAll("prompt");
  const bool text = kvt_model_has_tokenizer(h.model) != 0;
  for (size_t i = 0; i < id_prompts.size() + text_prompts.size(); ++i) {
    kvt_request* r = nullptr;
    kvt_request_create(&r);
    h.requests.push_back(r);
    kvt_status s = KVT_OK;
    if (i < id_prompts.size()) {
      auto prompt = ParseIds(id_prompts[i]);
      if (!prompt.ok()) return Fail(std::string(prompt.status().message()));
      s = kvt_request_set_prompt_tokens(r, prompt->data(), static_cast<int32_t>(prompt->size()));
    } else {
      const std::string& p = text_prompts[i - id_prompts.size()];
      s = args->Has("chat") ? kvt_request_add_chat_message(r, "user", p.c_str())
                            : kvt_request_set_prompt_text(r, p.data(), static_cast<int32_t>(p.size()));
    }
    for (const std::string& stop : args->GetAll("stop")) {
      if (s == KVT_OK) s = kvt_request_add_stop_string(r, stop.data(), static_cast<int32_t>(stop.size()));
    }
    if (s == KVT_OK) s = kvt_request_set_max_new_tokens(r, static_cast<int32_t>(*max_tokens));
    if (s == KVT_OK) s = kvt_request_set_temperature(r, static_cast<float>(*temperature));
    if (s == KVT_OK) s = kvt_request_set_top_k(r, static_cast<int32_t>(*top_k));
    if (s == KVT_OK) s = kvt_request_set_top_p(r, static_cast<float>(*top_p));
    if (s == KVT_OK) s = kvt_request_set_seed(r, *seed + static_cast<int64_t>(i));
    if (s == KVT_OK) s = kvt_request_set_stop_tokens(r, stop_ids.data(), static_cast<int32_t>(stop_ids.size()));
    if (s == KVT_OK) s = kvt_request_set_ignore_eos(r, args->Has("ignore-eos") ? 1 : 0);
    if (s == KVT_OK && !schema_text.empty()) s = kvt_request_set_json_schema(r, schema_text.c_str());
    if (s == KVT_OK && !grammar_text.empty()) s = kvt_request_set_grammar(r, grammar_text.c_str());
    if (s != KVT_OK) return Fail("sequence " + std::to_string(i) + ": " + kvt_request_errmsg(r));
    int64_t id = 0;
    if (kvt_status a = kvt_sequence_add(h.context, r, &id); a != KVT_OK) {
      return Fail("sequence " + std::to_string(i) + ": " + kvt_status_string(a) + ": " + kvt_context_errmsg(h.context));
    }
    ids.push_back(id);
  }

  kvt_events_create(&h.events);
  while (kvt_context_num_unfinished(h.context) > 0) {
    if (kvt_status s = kvt_step(h.context, h.events); s != KVT_OK) {
      return Fail(std::string("step failed: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context));
    }
    for (int32_t i = 0; i < kvt_events_count(h.events); ++i) {
      int64_t seq = 0;
      int32_t token = 0, reason = 0;
      kvt_events_get(h.events, i, &seq, &token, &reason);
      const char* piece = nullptr;
      int32_t piece_len = 0;
      kvt_events_text(h.events, i, &piece, &piece_len);
      if (token != KVT_NO_TOKEN) generated[seq].push_back(token);
      texts[seq].append(piece, static_cast<size_t>(piece_len));
      if (reason != KVT_FINISH_REASON_NONE) finish[seq] = reason;
      if (!json && text && piece_len > 0) {
        std::printf("seq %lld: %s\n", static_cast<long long>(seq), nlohmann::json(std::string(piece, static_cast<size_t>(piece_len))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      } else if (!json && token != KVT_NO_TOKEN) {
        std::printf("seq %lld: token %d\n", static_cast<long long>(seq), token);
      }
      if (!json && reason != KVT_FINISH_REASON_NONE) {
        std::printf("seq %lld: finished (%s)\n", static_cast<long long>(seq), FinishName(reason));
      }
    }
  }

  int32_t stats_len = 0;
  kvt_context_stats_json(h.context, nullptr, 0, &stats_len);
  std::string stats_text(static_cast<size_t>(stats_len) + 1, '\0');
  kvt_context_stats_json(h.context, stats_text.data(), stats_len + 1, &stats_len);
  stats_text.resize(static_cast<size_t>(stats_len));
  nlohmann::json stats = nlohmann::json::parse(stats_text);

  if (json) {
    nlohmann::json out;
    out["sequences"] = nlohmann::json::array();
    for (int64_t id : ids) {
      nlohmann::json entry = {{"id", id}, {"tokens", generated[id]}, {"finish_reason", FinishName(finish[id])}};
      if (text) entry["text"] = texts[id];
      out["sequences"].push_back(entry);
    }
    out["stats"] = stats;
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("\n");
  for (int64_t id : ids) {
    if (text) {
      std::printf("seq %lld [%s]: %s\n", static_cast<long long>(id), FinishName(finish[id]),
                  nlohmann::json(texts[id]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("seq %lld [%s]: %s\n", static_cast<long long>(id), FinishName(finish[id]),
                  absl::StrJoin(generated[id], " ").c_str());
    }
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
  return 0;
}

}  // namespace

KVTIER_REGISTER_COMMAND("run", "generate from token ids (all budgets and sampling as flags)", RunMain);

}  // namespace kvtier::cli
