// `kvtier perplexity`: scores a text with a model through the public C API (prompt
// log-probabilities): the mean negative log-likelihood per token and the perplexity.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "command.h"
#include "command_line.h"
#include "context_flags.h"
#include "cuda_env.h"
#include "kvtier/kvtier.h"
#include "nlohmann/json.hpp"

namespace kvtier::cli {
namespace {

constexpr char kPerplexityDescription[] =
    "Scores a text with the model: the mean negative log-likelihood (natural log) of every token\n"
    "from the second on given the tokens before it, and its exponent, the perplexity (what\n"
    "transformers reports as exp(loss) with labels = input ids). A text longer than --window\n"
    "tokens is cut into consecutive windows, each scored on its own (a window's first token has\n"
    "no context and is not scored); the windows run as one batch, each prefilled in chunks.";

struct PerplexityFlags {
  std::string model, text, tokens;
  int64_t window = 0;  // 0: the model's context - 1, at most 4096
  bool json = false;
  ContextFlags context;
};

void AddFlags(CommandLine* cl, PerplexityFlags* f) {
  cl->AddString("--model", &f->model, "HF checkpoint directory or GGUF file", "DIR|FILE")->required();
  cl->AddString("--text", &f->text, "UTF-8 text, tokenized with the model's tokenizer (BOS as it adds it)", "FILE");
  cl->AddString("--tokens", &f->tokens, "token ids (separated by spaces, commas or newlines) instead", "FILE");
  cl->AddInt("--window", &f->window, 2, INT32_MAX, "tokens per window (default: the model's context - 1, at most 4096)");
  cl->AddSwitch("--json", &f->json, "print {tokens, scored_tokens, windows, window, mean_nll, perplexity}");
  f->context.AddTo(cl);
}

struct PerplexityHandles {
  kvt_model* model = nullptr;
  kvt_options* options = nullptr;
  kvt_context* context = nullptr;
  kvt_events* events = nullptr;
  kvt_request* request = nullptr;
  ~PerplexityHandles() {
    kvt_request_free(request);
    kvt_events_free(events);
    kvt_context_free(context);
    kvt_options_free(options);
    kvt_model_free(model);
  }
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<std::vector<int32_t>> ParseTokens(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(" ,\t\r\n"), absl::SkipWhitespace())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) return absl::InvalidArgumentError("--tokens: '" + std::string(part) + "' is not a token id");
    ids.push_back(id);
  }
  return ids;
}

int PerplexityMain(int argc, char** argv) {
  CommandLine cl("perplexity", kPerplexityDescription);
  PerplexityFlags f;
  AddFlags(&cl, &f);
  if (auto status = cl.Parse(argc, argv)) return *status;
  if (f.text.empty() == f.tokens.empty()) return cl.UsageError("give one of --text or --tokens");
  auto Fail = [&](const std::string& message) { return cl.Fail(kExitFailure, message); };
  PerplexityHandles h;
  char err[1024];
  if (kvt_status s = kvt_model_load(f.model.c_str(), &h.model, err, sizeof err); s != KVT_OK) {
    return Fail(std::string(kvt_status_string(s)) + ": " + err);
  }
  std::vector<int32_t> ids;
  if (!f.tokens.empty()) {
    auto text = ReadFile(f.tokens);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    auto parsed = ParseTokens(*text);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    ids = std::move(*parsed);
  } else {
    auto text = ReadFile(f.text);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    const int32_t len = static_cast<int32_t>(text->size());
    int32_t n = 0;
    if (kvt_status s = kvt_model_tokenize(h.model, text->data(), len, 1, nullptr, 0, &n, err, sizeof err); s != KVT_OK) {
      return Fail(std::string(kvt_status_string(s)) + ": " + err);
    }
    ids.resize(static_cast<size_t>(n));
    kvt_model_tokenize(h.model, text->data(), len, 1, ids.data(), n, &n, err, sizeof err);
  }
  if (ids.size() < 2) return Fail("the text has fewer than 2 tokens: nothing to score");

  std::string info(1 << 14, '\0');
  int32_t info_len = 0;
  kvt_model_info_json(h.model, info.data(), static_cast<int32_t>(info.size()), &info_len);
  info.resize(std::min<size_t>(static_cast<size_t>(info_len), info.size()));
  const int64_t context = nlohmann::json::parse(info, nullptr, false).value("max_position_embeddings", int64_t{2048});
  const int64_t window = f.window > 0 ? f.window : std::min<int64_t>(context - 1, 4096);
  if (window < 2 || window >= context) {
    return cl.UsageError("--window must be in [2, " + std::to_string(context - 1) + "] (the model's context - 1)");
  }

  kvt_options_create(&h.options);
  if (SetCudaOptionsFromEnvironment(h.options) != KVT_OK) {
    return cl.Fail(kExitUsage, std::string("KVTIER_CUDA_*: ") + kvt_options_errmsg(h.options));
  }
  if (std::string error = f.context.Apply(h.options); !error.empty()) return cl.Fail(kExitUsage, error);
  if (kvt_status s = kvt_context_create(h.model, h.options, &h.context, err, sizeof err); s != KVT_OK) {
    return Fail(std::string(kvt_status_string(s)) + ": " + ContextFlags::InFlagTerms(err));
  }
  kvt_events_create(&h.events);
  kvt_request_create(&h.request);
  kvt_request_set_max_new_tokens(h.request, 1);
  kvt_request_set_ignore_eos(h.request, 1);
  kvt_request_set_prompt_logprobs(h.request, 0);

  // Windows (a last one of a single token would score nothing) are added while the waiting queue takes them (KVT_ERR_BUSY: step, then retry);
  // each finished one is read and released.
  std::deque<size_t> pending;
  for (size_t start = 0; start + 1 < ids.size(); start += static_cast<size_t>(window)) pending.push_back(start);
  const int64_t num_windows = static_cast<int64_t>(pending.size());
  std::vector<int64_t> running;
  double nll = 0;
  int64_t scored = 0;
  std::vector<float> values;
  while (!pending.empty() || !running.empty()) {
    while (!pending.empty()) {
      const size_t start = pending.front();
      const size_t len = std::min(ids.size() - start, static_cast<size_t>(window));  // >= 2
      kvt_request_set_prompt_tokens(h.request, ids.data() + start, static_cast<int32_t>(len));
      int64_t id = 0;
      const kvt_status s = kvt_sequence_add(h.context, h.request, &id);
      if (s == KVT_ERR_BUSY && !running.empty()) break;
      if (s != KVT_OK) return Fail(std::string(kvt_status_string(s)) + ": " + kvt_context_errmsg(h.context));
      running.push_back(id);
      pending.pop_front();
    }
    if (running.empty()) break;
    if (kvt_status s = kvt_step(h.context, h.events); s != KVT_OK) {
      return Fail(std::string("step failed: ") + kvt_status_string(s) + ": " + kvt_context_errmsg(h.context));
    }
    for (int32_t i = 0; i < kvt_events_count(h.events); ++i) {
      int64_t seq = 0;
      int32_t reason = 0;
      kvt_events_get(h.events, i, &seq, nullptr, &reason);
      if (reason == KVT_FINISH_REASON_NONE) continue;
      if (reason != KVT_FINISH_REASON_LENGTH && reason != KVT_FINISH_REASON_STOP) {
        char why[512];
        int32_t why_len = 0;
        kvt_sequence_error(h.context, seq, why, sizeof why, &why_len);
        return Fail("a window failed: " + std::string(why));
      }
      int32_t n = 0;
      kvt_sequence_prompt_logprobs(h.context, seq, nullptr, 0, &n);
      values.resize(static_cast<size_t>(n));
      kvt_sequence_prompt_logprobs(h.context, seq, values.data(), n, &n);
      for (float v : values) nll -= v;
      scored += n;
      kvt_sequence_release(h.context, seq);
      std::erase(running, seq);
    }
  }
  const double mean_nll = nll / static_cast<double>(scored);
  const double perplexity = std::exp(mean_nll);
  if (f.json) {
    const nlohmann::json out = {{"tokens", ids.size()}, {"scored_tokens", scored}, {"windows", num_windows},
                                {"window", window},     {"mean_nll", mean_nll},   {"perplexity", perplexity}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("tokens %zu, scored %lld in %lld window(s) of up to %lld\nmean NLL %.6f nats/token, perplexity %.4f\n",
              ids.size(), static_cast<long long>(scored), static_cast<long long>(num_windows),
              static_cast<long long>(window), mean_nll, perplexity);
  return 0;
}

}  // namespace

KVTIER_REGISTER_COMMAND("perplexity", "mean negative log-likelihood and perplexity of a text", PerplexityMain);

}  // namespace kvtier::cli
