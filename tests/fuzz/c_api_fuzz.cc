// Fuzzes sequences of C API calls on one context: options (budgets, block size, queue
// bounds), then add / cancel / step / status / tokens / text / stats / release with random
// arguments, including invalid ones (unknown ids, ids out of vocabulary, bad sampling
// values, short buffers). Every call must return a status, never crash; at the end the
// context drains, every handle is freed and kvt_live_handles is back where it started.
// The model (tiny-llama, byte tokenizer) is written and loaded once per process.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kvtier/kvtier.h"
#include "model/random_checkpoint.h"
#include "tokenizer/byte_tokenizer_writer.h"

namespace {

kvt_model* Model() {
  static kvt_model* model = [] {
    const std::string dir = kvtier::fuzz::TempDir() + "/tiny";
    auto spec = kvtier::RandomCheckpointPreset("tiny-llama");
    if (!spec.ok()) std::abort();
    spec->vocab = kvtier::tokenizer::kByteTokenizerVocabSize;
    spec->bos_token_id = kvtier::tokenizer::kByteTokenizerBosId;
    spec->eos_token_ids = {kvtier::tokenizer::kByteTokenizerEosId};
    spec->num_threads = 1;
    if (!kvtier::WriteRandomCheckpoint(*spec, dir).ok()) std::abort();
    if (!kvtier::tokenizer::WriteByteTokenizer(dir).ok()) std::abort();
    kvt_model* m = nullptr;
    char err[256];
    if (kvt_model_load(dir.c_str(), &m, err, sizeof err) != KVT_OK) {
      std::fprintf(stderr, "model: %s\n", err);
      std::abort();
    }
    return m;
  }();
  return model;
}

const char* const kStatNames[] = {"steps", "tiers.gpu.used_bytes", "tiers.host.used_bytes",
                                  "swaps_out", "sequences.running", "", "tiers", "no.such",
                                  "tiers.gpu", "preemptions.", ".steps"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvt_model* model = Model();
  const int64_t handles_before = kvt_live_handles();
  kvtier::fuzz::Reader in(data, size);

  kvt_options* options = nullptr;
  if (kvt_options_create(&options) != KVT_OK) std::abort();
  kvt_options_set_string(options, "backend", "cpu");
  kvt_options_set_int(options, "threads", 1);
  const int64_t block_tokens = 1 + in.U8() % 16;
  kvt_options_set_int(options, "block_tokens", (in.U8() & 0x80) ? in.I64() : block_tokens);
  // KV bytes per token of tiny-llama (2 layers, 2 kv heads, head_dim 16, fp32, K+V).
  const int64_t token_bytes = 2 * 2 * 2 * 16 * 4;
  kvt_options_set_int(options, "gpu_kv_bytes", (1 + in.U8() % 32) * block_tokens * token_bytes);
  kvt_options_set_int(options, "host_kv_bytes", (in.U8() % 16) * block_tokens * token_bytes);
  kvt_options_set_int(options, "max_tokens_per_step", 1 + in.U8() % 64);
  kvt_options_set_int(options, "max_running", 1 + in.U8() % 4);
  kvt_options_set_int(options, "max_waiting", 1 + in.U8() % 16);
  static const char* const kPreemption[] = {"auto", "swap", "recompute", "bogus"};
  kvt_options_set_string(options, "preemption", kPreemption[in.U8() % 4]);
  if (in.U8() == 0xff) kvt_options_set_int(options, "gpu_kv_bytes", in.I64());  // invalid too

  kvt_context* ctx = nullptr;
  char err[128];
  kvt_status created = kvt_context_create(model, options, &ctx, err, in.U8() % sizeof err);
  kvt_options_free(options);
  if (created != KVT_OK) {
    if (ctx != nullptr) std::abort();
    if (kvt_live_handles() != handles_before) std::abort();
    return 0;
  }
  kvt_events* events = nullptr;
  if (kvt_events_create(&events) != KVT_OK) std::abort();

  std::vector<int64_t> ids;
  auto pick_id = [&]() -> int64_t {
    const uint8_t r = in.U8();
    if (ids.empty() || r >= 224) return static_cast<int64_t>(r) - 240;  // unknown/negative
    return ids[r % ids.size()];
  };
  std::vector<int32_t> buf(64);
  std::vector<char> text(64);
  for (int op = 0; op < 64 && !in.empty(); ++op) {
    switch (in.U8() % 10) {
      case 0:
      case 1: {  // add
        kvt_request* req = nullptr;
        if (kvt_request_create(&req) != KVT_OK) std::abort();
        const uint8_t kind = in.U8();
        if (kind % 4 == 0) {
          std::string t;
          for (int n = in.U8() % 12; n > 0; --n) t.push_back(static_cast<char>(in.U8()));
          kvt_request_set_prompt_text(req, t.data(), static_cast<int32_t>(t.size()));
        } else if (kind % 4 == 1) {
          kvt_request_add_chat_message(req, (in.U8() & 1) ? "user" : "robot", "hi there");
        } else {
          std::vector<int32_t> prompt(in.U8() % 14);
          for (auto& t : prompt) t = (in.U8() == 0) ? static_cast<int32_t>(in.U32()) : in.U8();
          kvt_request_set_prompt_tokens(req, prompt.data(), static_cast<int32_t>(prompt.size()));
        }
        kvt_request_set_max_new_tokens(req, static_cast<int32_t>(in.U8() % 6) - 1);  // -1, 0 invalid
        if (kind & 0x10) kvt_request_set_temperature(req, static_cast<float>(in.U8()) / 64.0f - 0.5f);
        if (kind & 0x20) kvt_request_set_top_k(req, static_cast<int32_t>(in.U8()) - 8);
        if (kind & 0x40) kvt_request_set_top_p(req, static_cast<float>(in.U8()) / 200.0f);
        if (kind & 0x80) {
          const int32_t stops[2] = {static_cast<int32_t>(in.U8()), static_cast<int32_t>(in.U32())};
          kvt_request_set_stop_tokens(req, stops, 1 + in.U8() % 2);
          kvt_request_add_stop_string(req, "ab", 2);
        }
        kvt_request_set_seed(req, in.I64());
        kvt_request_set_ignore_eos(req, in.U8() & 1);
        kvt_request_set_priority(req, static_cast<int8_t>(in.U8()));
        int64_t id = 0;
        if (kvt_sequence_add(ctx, req, &id) == KVT_OK) {
          if (id <= 0) std::abort();
          ids.push_back(id);
        }
        kvt_request_free(req);
        break;
      }
      case 2:
        kvt_sequence_cancel(ctx, pick_id());
        break;
      case 3:
      case 4:
      case 5: {
        if (kvt_step(ctx, (in.U8() & 1) ? events : nullptr) == KVT_OK) {
          const int32_t n = kvt_events_count(events);
          for (int32_t i = -1; i <= n; ++i) {
            int64_t sid;
            int32_t token, finish;
            const char* t;
            int32_t tl;
            kvt_events_get(events, i, &sid, &token, &finish);
            kvt_events_text(events, i, &t, &tl);
          }
        }
        break;
      }
      case 6: {
        int32_t state, finish, out_len;
        const int64_t id = pick_id();
        kvt_sequence_status(ctx, id, &state, &finish);
        const int32_t len = in.U8() % 65;
        kvt_sequence_tokens(ctx, id, len ? buf.data() : nullptr, len, &out_len);
        const int32_t tlen = in.U8() % 65;
        kvt_sequence_text(ctx, id, tlen ? text.data() : nullptr, tlen, &out_len);
        break;
      }
      case 7:
        kvt_sequence_release(ctx, pick_id());
        break;
      case 8: {
        int32_t out_len = 0;
        const int32_t len = in.U8() % 65;
        kvt_context_stats_json(ctx, len ? text.data() : nullptr, len, &out_len);
        int64_t v;
        kvt_context_stat(ctx, kStatNames[in.U8() % (sizeof kStatNames / sizeof kStatNames[0])], &v);
        kvt_context_errmsg_copy(ctx, text.data(), in.U8() % 65);
        break;
      }
      case 9:
        kvt_context_num_unfinished(ctx);
        (void)kvt_context_errmsg(ctx);
        break;
    }
  }
  for (int i = 0; i < 2000 && kvt_context_num_unfinished(ctx) > 0; ++i) {
    if (kvt_step(ctx, events) != KVT_OK) break;
  }
  if (kvt_context_num_unfinished(ctx) != 0) {
    std::fprintf(stderr, "context did not drain\n");
    std::abort();
  }
  int64_t used = -1;
  if (kvt_context_stat(ctx, "tiers.gpu.used_bytes", &used) == KVT_OK && used != 0) {
    // Finished sequences' blocks may stay cached for prefix reuse; only referenced blocks
    // count as used.
    std::fprintf(stderr, "gpu used_bytes %lld after drain\n", static_cast<long long>(used));
    std::abort();
  }
  if (std::getenv("KVTIER_FUZZ_VERBOSE") != nullptr) {
    int64_t steps = 0, generated = 0;
    kvt_context_stat(ctx, "steps", &steps);
    kvt_context_stat(ctx, "generated_tokens", &generated);
    std::fprintf(stderr, "c_api_fuzz: %zu sequences, %lld steps, %lld tokens\n", ids.size(),
                 static_cast<long long>(steps), static_cast<long long>(generated));
  }
  kvt_events_free(events);
  kvt_context_free(ctx);
  if (kvt_live_handles() != handles_before) std::abort();
  return 0;
}
