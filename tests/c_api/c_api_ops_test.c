/* Pure-C test of the operational parts of the public API, through libkvtier.so as a C
 * service uses them: the log callback, progress callbacks that can cancel, the Prometheus
 * metrics text and generation_config.json defaults.
 * Usage: c_api_ops_test MODEL_DIR SCRATCH_DIR (MODEL_DIR: the tiny Llama of mkmodel). */
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "c_check.h"
#include "kvtier/kvtier.h"

/* ---------------------------------------------------------------- logging */

#define MAX_LINES 64
struct log_capture {
  int count;
  int32_t levels[MAX_LINES];
  char lines[MAX_LINES][512];
  kvt_status reentrant_status; /* what kvt_set_log_callback returned from inside the callback */
};

static void capture_log(void* user_data, int32_t level, const char* message) {
  struct log_capture* c = (struct log_capture*)user_data;
  if (c->count < MAX_LINES) {
    c->levels[c->count] = level;
    strncpy(c->lines[c->count], message, sizeof c->lines[0] - 1);
    c->lines[c->count][sizeof c->lines[0] - 1] = '\0';
  }
  ++c->count;
  c->reentrant_status = kvt_set_log_callback(NULL, NULL, KVT_LOG_LEVEL_DEBUG);
}

/* Index of the first captured line containing both needles, or -1. */
static int find_line(const struct log_capture* c, const char* a, const char* b) {
  int i;
  for (i = 0; i < c->count && i < MAX_LINES; ++i) {
    if (strstr(c->lines[i], a) != NULL && (b == NULL || strstr(c->lines[i], b) != NULL)) return i;
  }
  return -1;
}

static void test_logging(const char* model_dir) {
  struct log_capture c;
  char err[512], stats[256];
  kvt_model* model = NULL;
  kvt_options* opts = NULL;
  kvt_context* ctx = NULL;
  int64_t value = 0;
  int line;
  memset(&c, 0, sizeof c);
  c.reentrant_status = KVT_OK;

  CHECK_STATUS(kvt_set_log_callback(capture_log, &c, 4), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_set_log_callback(capture_log, &c, -1), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_set_log_callback(capture_log, &c, KVT_LOG_LEVEL_INFO), KVT_OK);

  CHECK_STATUS(kvt_model_load(model_dir, &model, err, sizeof err), KVT_OK);
  if (model == NULL) return;
  /* backend auto (the default) with a host budget too small for one block. */
  kvt_options_create(&opts);
  kvt_options_set_string(opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_int(opts, "threads", 2);
  kvt_options_set_int(opts, "host_kv_bytes", 100);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  if (ctx != NULL) {
    line = find_line(&c, "host tier disabled", "host_kv_bytes 100");
    CHECK(line >= 0);
    if (line >= 0) CHECK(c.levels[line] == KVT_LOG_LEVEL_WARN);
    CHECK_STATUS(kvt_context_stats_json(ctx, stats, sizeof stats, NULL), KVT_OK);
    CHECK_STATUS(kvt_context_stat(ctx, "tiers.host.capacity_bytes", &value), KVT_OK);
    CHECK(value == 0);
    /* Where "auto" had to fall back to the CPU, one line says so and why. */
    if (strstr(stats, "\"backend\":\"cpu\"") != NULL) {
      line = find_line(&c, "backend auto: using the CPU (", NULL);
      CHECK(line >= 0);
      if (line >= 0) CHECK(c.levels[line] == KVT_LOG_LEVEL_WARN);
    }
  }
  /* The callback could not replace itself from inside. */
  CHECK(c.count > 0);
  CHECK(c.reentrant_status == KVT_ERR_STATE);
  kvt_context_free(ctx);
  ctx = NULL;

  /* Above the level: not called. Off: never called again. */
  c.count = 0;
  CHECK_STATUS(kvt_set_log_callback(capture_log, &c, KVT_LOG_LEVEL_ERROR), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  kvt_context_free(ctx);
  ctx = NULL;
  CHECK(c.count == 0);
  CHECK_STATUS(kvt_set_log_callback(NULL, NULL, KVT_LOG_LEVEL_DEBUG), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  kvt_context_free(ctx);
  CHECK(c.count == 0);
  kvt_options_free(opts);
  kvt_model_free(model);
}

/* ---------------------------------------------------------------- progress */

#define MAX_REPORTS 4096
struct progress_log {
  int count;
  char stages[MAX_REPORTS][16];
  int64_t done[MAX_REPORTS];
  int64_t total[MAX_REPORTS];
  const char* cancel_stage; /* cancel at the first report of this stage past 0 */
};

static int32_t record_progress(void* user_data, const char* stage, int64_t done, int64_t total) {
  struct progress_log* p = (struct progress_log*)user_data;
  if (p->count < MAX_REPORTS) {
    strncpy(p->stages[p->count], stage, sizeof p->stages[0] - 1);
    p->stages[p->count][sizeof p->stages[0] - 1] = '\0';
    p->done[p->count] = done;
    p->total[p->count] = total;
    ++p->count;
  }
  return p->cancel_stage != NULL && strcmp(stage, p->cancel_stage) == 0 && done > 0;
}

/* Each stage in `order` appears as one run of reports: starting at 0, never decreasing,
 * ending at its total. */
static void check_stages(const struct progress_log* p, const char* const* order, int num_stages) {
  int i = 0, s;
  for (s = 0; s < num_stages; ++s) {
    int64_t last = -1;
    CHECK(i < p->count && strcmp(p->stages[i], order[s]) == 0);
    if (i >= p->count || strcmp(p->stages[i], order[s]) != 0) {
      fprintf(stderr, "  expected stage %s at report %d\n", order[s], i);
      return;
    }
    CHECK(p->done[i] == 0);
    while (i < p->count && strcmp(p->stages[i], order[s]) == 0) {
      CHECK(p->done[i] >= last && p->done[i] <= p->total[i]);
      last = p->done[i];
      ++i;
    }
    CHECK(last == p->total[i - 1]);
  }
  CHECK(i == p->count);
}

static void test_progress(const char* model_dir) {
  static struct progress_log p; /* large: not on the stack */
  static const char* const load_stages[] = {"files", "tensors", "tokenizer"};
  static const char* const create_stages[] = {"weights", "kv_pools", "warmup"};
  char err[512];
  kvt_model* model = NULL;
  kvt_options* opts = NULL;
  kvt_context* ctx = NULL;
  int64_t handles = kvt_live_handles();

  memset(&p, 0, sizeof p);
  CHECK_STATUS(kvt_model_load_with_progress(model_dir, record_progress, &p, &model, err, sizeof err), KVT_OK);
  if (model == NULL) return;
  check_stages(&p, load_stages, 3);
  CHECK(p.count > 0 && p.total[p.count - 1] == 0); /* the tiny model has no tokenizer.json */

  /* Cancelled while checking tensors: no model, nothing left behind. */
  {
    kvt_model* cancelled = NULL;
    memset(&p, 0, sizeof p);
    p.cancel_stage = "tensors";
    CHECK_STATUS(kvt_model_load_with_progress(model_dir, record_progress, &p, &cancelled, err, sizeof err),
                 KVT_ERR_CANCELLED);
    CHECK(cancelled == NULL);
    CHECK(strstr(err, "tensors") != NULL);
    CHECK(strcmp(p.stages[p.count - 1], "tensors") == 0 && p.done[p.count - 1] == 1);
    CHECK(kvt_live_handles() == handles + 1);
  }

  kvt_options_create(&opts);
  kvt_options_set_string(opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_string(opts, "backend", "cpu");
  kvt_options_set_int(opts, "threads", 2);
  memset(&p, 0, sizeof p);
  CHECK_STATUS(kvt_options_set_progress_callback(NULL, record_progress, &p), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_options_set_progress_callback(opts, record_progress, &p), KVT_OK);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  check_stages(&p, create_stages, 3);
  CHECK(p.total[0] > 0); /* weights: checkpoint bytes */
  kvt_context_free(ctx);
  ctx = NULL;

  /* Cancelled while loading weights: no context. */
  memset(&p, 0, sizeof p);
  p.cancel_stage = "weights";
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_ERR_CANCELLED);
  CHECK(ctx == NULL);
  CHECK(strstr(err, "weights") != NULL);
  /* Without a callback again: no reports. */
  CHECK_STATUS(kvt_options_set_progress_callback(opts, NULL, NULL), KVT_OK);
  memset(&p, 0, sizeof p);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  CHECK(p.count == 0);
  kvt_context_free(ctx);
  kvt_options_free(opts);
  kvt_model_free(model);
  CHECK(kvt_live_handles() == handles);
  CHECK_STATUS(kvt_model_load_with_progress(NULL, NULL, NULL, &model, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(kvt_status_string(KVT_ERR_CANCELLED), "KVT_ERR_CANCELLED") == 0);
}

/* ---------------------------------------------------------------- metrics */

/* The number after "name " at the start of a line of text, or -1. */
static long long metric_value(const char* text, const char* name) {
  size_t n = strlen(name);
  const char* at = text;
  while ((at = strstr(at, name)) != NULL) {
    if ((at == text || at[-1] == '\n') && at[n] == ' ') return atoll(at + n + 1);
    at += n;
  }
  return -1;
}

static void test_metrics(const char* model_dir) {
  kvt_model* model = NULL;
  kvt_options* opts = NULL;
  kvt_context* ctx = NULL;
  kvt_request* req = NULL;
  int32_t prompt[6] = {5, 6, 7, 8, 9, 10};
  int32_t out[8];
  int32_t len = 0, reason = 0, text_len = 0, again = 0;
  int64_t generated = 0;
  char* text;
  int i;

  open_cpu_context(model_dir, &model, &opts, &ctx);
  if (ctx == NULL) return;
  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, prompt, 6);
  kvt_request_set_max_new_tokens(req, 5);
  kvt_request_set_ignore_eos(req, 1);
  for (i = 0; i < 3; ++i) CHECK_STATUS(kvt_generate(ctx, req, out, 8, &len, &reason), KVT_OK);

  CHECK_STATUS(kvt_context_metrics_text(NULL, NULL, 0, &text_len), KVT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(kvt_context_metrics_text(ctx, NULL, 8, &text_len), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvt_context_errmsg(ctx), "metrics buffer") != NULL);
  CHECK_STATUS(kvt_context_metrics_text(ctx, NULL, 0, &text_len), KVT_OK);
  CHECK(text_len > 0);
  text = (char*)malloc((size_t)text_len + 1);
  CHECK_STATUS(kvt_context_metrics_text(ctx, text, text_len + 1, &again), KVT_OK);
  CHECK(again == text_len && (int32_t)strlen(text) == text_len);
  CHECK_STATUS(kvt_context_stat(ctx, "generated_tokens", &generated), KVT_OK);
  CHECK(generated == 15);
  CHECK(metric_value(text, "kvtier_generated_tokens_total") == generated);
  CHECK(metric_value(text, "kvtier_sequences_finished_total{reason=\"completed\"}") == 3);
  CHECK(strstr(text, "# TYPE kvtier_generated_tokens_total counter\n") != NULL);
  CHECK(strstr(text, "# TYPE kvtier_tier_used_bytes gauge\n") != NULL);
  CHECK(strstr(text, "kvtier_tier_capacity_bytes{tier=\"gpu\"} ") != NULL);
  CHECK(strstr(text, "kvtier_tier_ready_bytes{tier=\"gpu\"} ") != NULL);
  CHECK(strstr(text, "# TYPE kvtier_time_to_first_token_seconds histogram\n") != NULL);
  CHECK(strstr(text, "# TYPE kvtier_inter_token_latency_seconds histogram\n") != NULL);
  CHECK(strstr(text, "# TYPE kvtier_step_duration_seconds histogram\n") != NULL);
  /* One first token per sequence; the four others of each are inter-token gaps. */
  CHECK(metric_value(text, "kvtier_time_to_first_token_seconds_count") == 3);
  CHECK(metric_value(text, "kvtier_time_to_first_token_seconds_bucket{le=\"+Inf\"}") == 3);
  CHECK(metric_value(text, "kvtier_inter_token_latency_seconds_count") == 12);
  CHECK(text[text_len - 1] == '\n');
  /* A truncated copy is still NUL-terminated. */
  {
    char small[16];
    CHECK_STATUS(kvt_context_metrics_text(ctx, small, sizeof small, &again), KVT_OK);
    CHECK(strlen(small) == sizeof small - 1 && again == text_len);
  }
  free(text);
  kvt_request_free(req);
  kvt_context_free(ctx);
  kvt_options_free(opts);
  kvt_model_free(model);
}

/* ---------------------------------------------------------------- generation_config.json */

/* A checkpoint directory sharing model_dir's weights, with this generation_config.json. */
static int make_variant(const char* model_dir, const char* scratch, const char* name, const char* generation_json,
                        char* out, size_t cap) {
  char from[1024], to[1024];
  const char* files[] = {"config.json", "model.safetensors"};
  char* model = realpath(model_dir, NULL); /* the links must not depend on the working directory */
  FILE* f;
  size_t i;
  if (model == NULL) return 0;
  snprintf(out, cap, "%s/%s", scratch, name);
  mkdir(scratch, 0755);
  mkdir(out, 0755);
  for (i = 0; i < 2; ++i) {
    snprintf(from, sizeof from, "%s/%s", model, files[i]);
    snprintf(to, sizeof to, "%s/%s", out, files[i]);
    unlink(to);
    if (symlink(from, to) != 0) {
      free(model);
      return 0;
    }
  }
  free(model);
  snprintf(to, sizeof to, "%s/generation_config.json", out);
  f = fopen(to, "w");
  if (f == NULL) return 0;
  fputs(generation_json, f);
  fclose(f);
  return 1;
}

/* Runs the request on a fresh CPU context of the model directory; returns the token count. */
static int32_t run_on(const char* dir, kvt_request* req, int32_t* out, int32_t cap, int32_t* reason) {
  char err[512];
  kvt_model* model = NULL;
  kvt_options* opts = NULL;
  kvt_context* ctx = NULL;
  int32_t len = -1;
  if (kvt_model_load(dir, &model, err, sizeof err) != KVT_OK) {
    fprintf(stderr, "cannot load %s: %s\n", dir, err);
    return -1;
  }
  kvt_options_create(&opts);
  kvt_options_set_string(opts, "gpu_kv_bytes", TEST_GPU_KV_BYTES);
  kvt_options_set_string(opts, "backend", "cpu");
  kvt_options_set_int(opts, "threads", 2);
  CHECK_STATUS(kvt_context_create(model, opts, &ctx, err, sizeof err), KVT_OK);
  CHECK_STATUS(kvt_generate(ctx, req, out, cap, &len, reason), KVT_OK);
  kvt_context_free(ctx);
  kvt_options_free(opts);
  kvt_model_free(model);
  return len;
}

static void test_generation_config(const char* model_dir, const char* scratch) {
  char dir[1024], err[512], info[4096];
  kvt_model* model = NULL;
  kvt_request* req = NULL;
  int32_t prompt[5] = {11, 12, 13, 14, 15};
  int32_t greedy[32], sampled[32], explicit_sampled[32], overridden[32];
  int32_t greedy_len, sampled_len, explicit_len, overridden_len, reason = 0, info_len = 0;
  char json[256];

  /* Greedy reference on the model as mkmodel wrote it (no sampling fields). */
  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, prompt, 5);
  kvt_request_set_max_new_tokens(req, 12);
  kvt_request_set_ignore_eos(req, 1);
  greedy_len = run_on(model_dir, req, greedy, 32, &reason);
  CHECK(greedy_len == 12);
  kvt_request_free(req);
  if (greedy_len != 12) return;

  /* Sampling defaults: a request that sets nothing samples as the file says. */
  CHECK(make_variant(model_dir, scratch, "sampling",
                     "{\"do_sample\": true, \"temperature\": 1.5, \"top_p\": 0.95, \"max_new_tokens\": 9,"
                     " \"num_beams\": 1, \"transformers_version\": \"4.45.0\", \"pad_token_id\": null}",
                     dir, sizeof dir));
  CHECK_STATUS(kvt_model_load(dir, &model, err, sizeof err), KVT_OK);
  if (model == NULL) return;
  CHECK_STATUS(kvt_model_info_json(model, info, sizeof info, &info_len), KVT_OK);
  CHECK(strstr(info, "\"generation_defaults\":{") != NULL);
  CHECK(strstr(info, "\"temperature\":1.5") != NULL);
  CHECK(strstr(info, "\"top_k\":50") != NULL); /* transformers' default when sampling */
  CHECK(strstr(info, "\"max_new_tokens\":9") != NULL);
  CHECK(strstr(info, "\"do_sample\":true") != NULL);
  kvt_model_free(model);

  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, prompt, 5);
  kvt_request_set_ignore_eos(req, 1);
  kvt_request_set_seed(req, 1234);
  sampled_len = run_on(dir, req, sampled, 32, &reason);
  CHECK(sampled_len == 9); /* max_new_tokens from the file */
  kvt_request_free(req);
  /* The same as setting the file's values explicitly on the plain model. */
  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, prompt, 5);
  kvt_request_set_ignore_eos(req, 1);
  kvt_request_set_seed(req, 1234);
  kvt_request_set_temperature(req, 1.5f);
  kvt_request_set_top_k(req, 50);
  kvt_request_set_top_p(req, 0.95f);
  kvt_request_set_max_new_tokens(req, 9);
  explicit_len = run_on(model_dir, req, explicit_sampled, 32, &reason);
  CHECK(explicit_len == sampled_len);
  CHECK(explicit_len == sampled_len && memcmp(sampled, explicit_sampled, sizeof(int32_t) * 9) == 0);
  CHECK(memcmp(sampled, greedy, sizeof(int32_t) * 9) != 0); /* it did sample */
  kvt_request_free(req);
  /* Explicit setters win: temperature 0 and 12 tokens give the greedy output. */
  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, prompt, 5);
  kvt_request_set_ignore_eos(req, 1);
  kvt_request_set_seed(req, 1234);
  kvt_request_set_temperature(req, 0.0f);
  kvt_request_set_max_new_tokens(req, 12);
  overridden_len = run_on(dir, req, overridden, 32, &reason);
  CHECK(overridden_len == 12 && memcmp(overridden, greedy, sizeof(int32_t) * 12) == 0);
  kvt_request_free(req);

  /* eos_token_id (a list) stops generation at the first greedy token. */
  snprintf(json, sizeof json, "{\"eos_token_id\": [%d, 3]}", (int)greedy[0]);
  CHECK(make_variant(model_dir, scratch, "eos", json, dir, sizeof dir));
  kvt_request_create(&req);
  kvt_request_set_prompt_tokens(req, prompt, 5);
  kvt_request_set_max_new_tokens(req, 12);
  overridden_len = run_on(dir, req, overridden, 32, &reason);
  CHECK(overridden_len == 1 && reason == KVT_FINISH_REASON_STOP);
  kvt_request_set_ignore_eos(req, 1); /* the request overrides it */
  overridden_len = run_on(dir, req, overridden, 32, &reason);
  CHECK(overridden_len == 12);
  kvt_request_free(req);

  /* A known field with a bad value refuses the load, naming the field. */
  CHECK(make_variant(model_dir, scratch, "bad-type", "{\"temperature\": \"hot\"}", dir, sizeof dir));
  CHECK_STATUS(kvt_model_load(dir, &model, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(err, "generation_config.json") != NULL && strstr(err, "temperature") != NULL);
  CHECK(make_variant(model_dir, scratch, "bad-range", "{\"do_sample\": true, \"top_p\": 1.5}", dir, sizeof dir));
  CHECK_STATUS(kvt_model_load(dir, &model, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(err, "top_p") != NULL);
  CHECK(make_variant(model_dir, scratch, "bad-json", "{\"top_k\": 4", dir, sizeof dir));
  CHECK_STATUS(kvt_model_load(dir, &model, err, sizeof err), KVT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(err, "generation_config.json") != NULL);
  CHECK(kvt_live_handles() == 0);
}

int main(int argc, char** argv) {
  if (!check_args(argc, argv, "MODEL_DIR SCRATCH_DIR")) return 2;
  test_logging(argv[1]);
  test_progress(argv[1]);
  test_metrics(argv[1]);
  test_generation_config(argv[1], argv[2]);
  CHECK(kvt_live_handles() == 0);
  return check_report();
}
