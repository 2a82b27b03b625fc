/**
 * @file kvtier/kvtier.h
 * @brief kvtier — embeddable LLM text generation with a three-tier KV cache.
 *
 * The only public header. C99, fixed-width types, opaque handles.
 *
 * Conventions (apply to every function below unless it says otherwise):
 *  - Fallible calls return kvt_status. KVT_OK is 0; every other value is an error.
 *  - A failed call changes nothing observable: no handle is created, no sequence is
 *    added, no other sequence is affected. Output parameters are left untouched unless
 *    the function documents otherwise.
 *  - Every input (strings, arrays) is copied before the call returns; the caller keeps
 *    ownership of its buffers.
 *  - Messages: calls on a context leave a message readable with kvt_context_errmsg /
 *    kvt_context_errmsg_copy; calls that create a handle take an optional caller buffer
 *    (errbuf, errbuf_len) that receives a NUL-terminated message on failure.
 *  - Nothing throws, aborts or exits across this boundary.
 *
 * Threading: handles of different contexts are independent. Within one context, one
 * thread at a time may call kvt_step / kvt_generate; kvt_sequence_add, kvt_sequence_cancel,
 * the kvt_sequence_* readers and the stats calls are safe from any thread at any time.
 * kvt_options, kvt_request and kvt_events objects are not synchronised: one thread each.
 * kvt_model is immutable after loading and may be shared by any number of contexts and
 * threads.
 */
#ifndef KVTIER_KVTIER_H_
#define KVTIER_KVTIER_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KVT_API
#elif defined(__GNUC__)
#define KVT_API __attribute__((visibility("default")))
#else
#define KVT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

#define KVT_VERSION_MAJOR 0         /**< major version of this header (the SONAME's number) */
#define KVT_VERSION_MINOR 1         /**< minor version of this header */
#define KVT_VERSION_PATCH 0         /**< patch version of this header */
#define KVT_VERSION_STRING "0.1.0"  /**< this header's version as a string */

/** Major version of the loaded library (may differ from the header's macros). */
KVT_API int32_t kvt_version_major(void);
/** Minor version of the loaded library. */
KVT_API int32_t kvt_version_minor(void);
/** Patch version of the loaded library. */
KVT_API int32_t kvt_version_patch(void);
/** Version of the loaded library as a static string, e.g. "0.1.0". */
KVT_API const char* kvt_version_string(void);

/* ---------------------------------------------------------------- status */

/** The result of every fallible call: KVT_OK or the error's kind. */
typedef enum kvt_status {
  KVT_OK = 0,                   /**< success */
  KVT_ERR_INVALID_ARGUMENT = 1, /**< a parameter is null, out of range or malformed */
  KVT_ERR_NOT_FOUND = 2,        /**< unknown sequence id, missing file or tensor */
  KVT_ERR_UNSUPPORTED = 3,      /**< architecture, dtype, tokenizer or backend not supported */
  KVT_ERR_CAPACITY = 4,         /**< the request can never fit in the configured memory */
  KVT_ERR_BUSY = 5,             /**< the waiting queue is full: retry later (back-pressure) */
  KVT_ERR_IO = 6,               /**< a file could not be read or written */
  KVT_ERR_CORRUPT = 7,          /**< a file or stored block failed validation */
  KVT_ERR_OUT_OF_MEMORY = 8,    /**< an allocation at creation time failed */
  KVT_ERR_STATE = 9,            /**< the call is not valid in the object's current state */
  KVT_ERR_BACKEND = 10,         /**< the compute backend failed (e.g. CUDA error) */
  KVT_ERR_INTERNAL = 11,        /**< a bug in kvtier: please report it */
  KVT_ERR_CANCELLED = 12        /**< a progress callback asked the call to stop */
} kvt_status;

/** A static English name for a status ("KVT_ERR_BUSY"); never NULL. */
KVT_API const char* kvt_status_string(kvt_status status);

/** Why a sequence stopped. */
typedef enum kvt_finish_reason {
  KVT_FINISH_REASON_NONE = 0,      /**< still running */
  KVT_FINISH_REASON_STOP = 1,      /**< a stop/eos token (or stop string) was produced */
  KVT_FINISH_REASON_LENGTH = 2,    /**< max_new_tokens reached, or the context is full */
  KVT_FINISH_REASON_CANCELLED = 3, /**< kvt_sequence_cancel */
  KVT_FINISH_REASON_ERROR = 4,     /**< the sequence failed alone; the others go on */
  /** the output is complete per the request's JSON schema or grammar (nothing more can
   * follow, or an eos/stop token came once it was complete). A constrained sequence that
   * ends any other way (LENGTH, STOP by a stop string, CANCELLED) is incomplete. */
  KVT_FINISH_REASON_GRAMMAR = 5
} kvt_finish_reason;

/** Where a sequence is in its life. */
typedef enum kvt_sequence_state {
  KVT_SEQUENCE_STATE_WAITING = 0,  /**< admitted, not yet scheduled */
  KVT_SEQUENCE_STATE_RUNNING = 1,  /**< prefilling or decoding */
  KVT_SEQUENCE_STATE_PAUSED = 2,   /**< preempted: KV swapped out or dropped for recompute */
  KVT_SEQUENCE_STATE_FINISHED = 3  /**< see its finish reason */
} kvt_sequence_state;

/** Marks an event that carries no token (a sequence cancelled or failed between steps). */
#define KVT_NO_TOKEN (-1)

/** Number of kvtier handles (models, contexts, options, requests, events) currently alive
 * in this process. Bindings use it to prove they release everything. */
KVT_API int64_t kvt_live_handles(void);

/* ---------------------------------------------------------------- options */

/** Context options. Every setter validates its value and returns KVT_ERR_INVALID_ARGUMENT
 * (message in kvt_options_errmsg) for unknown keys or out-of-range values; the option
 * keeps its previous value then. Keys and defaults:
 *   "backend"            string  "auto" | "cpu" | "cpu-reference" | "cuda"
 *                                "cpu" keeps a GGUF file's quantized blocks
 *                                and multiplies them in integers as
 *                                llama.cpp does; "cpu-reference" widens
 *                                every weight to fp32 (the oracle of the
 *                                tests)                                 default "auto"
 *   "threads"            int     CPU threads, 0 = all cores               default 0
 *   "gpu_kv_bytes"       int     device-tier KV budget, bytes; 0 = all that
 *                                gpu_mem_limit leaves after weights+workspace;
 *                                not set (or the string "auto"): sized from
 *                                the model — one sequence of the model's
 *                                whole context (max_position_embeddings)
 *                                plus one block for each other of
 *                                max_running sequences, within a quarter of
 *                                physical memory (CPU) or 90% of the
 *                                device's free memory (CUDA) and within
 *                                what gpu_mem_limit leaves                default: not set
 *   "host_kv_bytes"      int     host-tier KV budget, bytes, 0 = off      default 0
 *   "disk_kv_bytes"      int     disk-tier KV budget, bytes, 0 = off      default 0
 *   "disk_path"          string  file backing the disk tier; one context  default ""
 *                                holds it at a time (locked while the context lives)
 *   "block_tokens"       int     tokens per KV block, 1..1024             default 16
 *   "max_tokens_per_step" int    token budget of one step                 default 512
 *   "max_running"        int     sequences in one batch, 1..65536         default 256
 *   "max_waiting"        int     waiting queue bound (KVT_ERR_BUSY), >= 1 default 1024
 *   "preemption"         string  "auto" | "swap" | "recompute"            default "auto"
 *   "gpu_mem_limit"      int     total device bytes the process holds    default 0
 *                                because of the context (weights, KV,
 *                                workspace, and the CUDA runtime's share
 *                                measured from the process's device
 *                                bytes), 0 = no cap
 *   "load_or_recompute"  int     1: a prompt prefix found only on disk or in
 *                                the remote tier has its front recomputed while
 *                                its back loads, split by measured cost; 0:
 *                                always loaded                            default 1
 *   "prefix_cache"       int     1: computed full blocks are kept as prefix-cache
 *                                entries for later prompts; 0: none      default 1
 *   "kv_layer_groups"    int     1: a model with sliding-window layers keeps
 *                                each window's layers in blocks of their own,
 *                                given back once no query reads them (more
 *                                sequences in the same KV budget; a swap to
 *                                the host or disk tier moves only the blocks
 *                                kept; prefix entries go to every tier
 *                                under their group's key); the cpu
 *                                and cuda backends at tensor_parallel 1
 *                                only, else (and 0) one group of every
 *                                layer                                    default 1
 *   "weight_dtype"       string  "auto" | "bf16" | "fp16" | "fp8" | "q8_0" | "q4_k": format
 *                                the weights are held in; fp8 = E4M3 with one fp32 scale per
 *                                output channel for 16/32-bit checkpoints (embeddings,
 *                                lm_head and norms stay wider). q8_0 / q4_k (cpu backend
 *                                only): GGUF's blocks for every matrix, quantized at load as
 *                                llama.cpp's reference quantizer does (the same bytes as a
 *                                GGUF of that type; the embedding lookups read their
 *                                values). auto: CPU fp32, CUDA the checkpoint's
 *                                16-bit type (an FP8 checkpoint's values, dequantized).
 *                                The CPU backend computes in fp32 on the rounded values; a
 *                                format a backend cannot hold fails kvt_context_create
 *                                with KVT_ERR_UNSUPPORTED naming it      default "auto"
 *   "kv_dtype"           string  "auto" | "bf16" | "fp16" | "fp8": format of the KV cache
 *                                on every tier (auto: CPU fp32, CUDA the compute type).
 *                                fp8: E4M3 codes + one fp32 scale per token and KV head,
 *                                the same bytes on both backends (CUDA: head_dim 64 or
 *                                128); the host and disk tiers hold the same bytes, and
 *                                cached blocks of one format are never used by the
 *                                other. Same refusal rule                  default "auto"
 *   "tensor_parallel"    int     ranks the model is split over: 1, 2, 4 or 8 (attention
 *                                heads, KV heads and MLP rows each divided by it, or
 *                                kvt_context_create fails with KVT_ERR_INVALID_ARGUMENT
 *                                naming the number; mixture-of-experts models need 1).
 *                                The cpu backend runs the ranks in one process (the
 *                                sharded plan, docs/TENSOR_PARALLEL.md); the cuda backend
 *                                refuses > 1 for now (KVT_ERR_UNSUPPORTED). KV blocks keep
 *                                the TP=1 format on every tier, so cached prefixes are
 *                                shared across degrees                     default 1
 *   "devices"            string  GPU ordinals of the ranks, "0,1": as many as
 *                                tensor_parallel; "" = the first ones     default ""
 *   "sharded_reduction"  int     1: the cpu backend runs the sharded plan at
 *                                tensor_parallel 1 too; its sums then have the order
 *                                every degree gives (bit-identical results at 1, 2, 4,
 *                                8), not the plain path's                  default 0
 * The remote tier: full blocks shared through Redis by every process (on any host) that
 * names the same server, keyed and checked as the disk tier's (see README.md):
 *   "remote_kv_url"      string  "redis://host:port", or a Redis Cluster's
 *                                seeds "redis://host:port,host:port"; "" = off default ""
 *   "remote_kv_ttl_seconds" int  expiry of each stored block, 0 = none
 *                                (Redis's maxmemory policy evicts)        default 0
 *   "remote_kv_max_bytes_in_flight" int  bytes of puts and lookups queued
 *                                at once; more are refused (not shared)   default 64 MiB
 *   "remote_kv_timeout_ms" int   bound on a connect, each read or write,
 *                                and a step's wait for a lookup, 1..600000 default 100
 *   "remote_kv_retry_ms" int     after a failure the tier is off this long,
 *                                then tried again                         default 5000
 *   "remote_kv_connections" int  lookups run in parallel on this many
 *                                connections (threads) per node, 1..64    default 4
 * Sizes are plain byte counts; kvt_options_set_string also accepts "64MiB", "2GiB", ... for
 * the *_bytes keys, remote_kv_max_bytes_in_flight and gpu_mem_limit.
 * CUDA diagnostics, each 0 or 1 except the last: switches between equivalent ways of
 * running the same forward, to measure what a feature gives or to rule it out when chasing
 * a problem (the CPU backend ignores them; the kvtier CLI sets them from the KVTIER_CUDA_*
 * environment variables, see README.md):
 *   "cuda_graphs"        int     decode steps replayed as CUDA graphs     default 1
 *   "cuda_fast_attention" int    decode/prefill attention kernels where
 *                                the model's shape fits, else the generic default 1
 *   "cuda_host_kv_stream_tokens" int  sequences longer than the device tier
 *                                on CUDA: positions of host-resident KV
 *                                one step may stream (two device staging
 *                                buffers of one layer of that many
 *                                positions, inside gpu_mem_limit); longer
 *                                contexts are refused; 0: none run     default 0
 *   "cuda_pdl"           int     programmatic dependent launch            default 1
 *   "cuda_prefill_wgmma" int     prefill attention on the Hopper wgmma
 *                                kernel where it runs (bf16 compute,
 *                                head_dim 128, compute capability 9.0);
 *                                0 keeps the mma.sync kernel              default 1
 *   "cuda_prefill_cudnn" int     prefill attention on cuDNN's fused
 *                                attention (libcudnn.so.9 loaded at run
 *                                time: KVTIER_CUDNN_LIBRARY, else the
 *                                library path) where it applies (bf16
 *                                compute, head_dim 64 or 128, plain
 *                                scores); the kernels above run what it
 *                                cannot, and stats "compute_path" says
 *                                which ran and why. 1: the steps whose
 *                                chunks fill the step's token budget (a
 *                                long prompt's; plans built at warm-up),
 *                                2: every step (a plan per new chunk
 *                                length), 0: never                        default 1
 *   "cuda_prefill_fp8_attention" int  with kv_dtype fp8, 1 runs the
 *                                prefill steps on cuDNN on its fp8
 *                                attention: queries, keys and values as
 *                                E4M3 at one scale per tensor (each cached
 *                                value rounded once more), the
 *                                probabilities and the output in E4M3
 *                                (then bf16); 0 gathers
 *                                the KV into bf16 for its bf16 attention  default 0
 *   "cuda_overlap_attention" int  a step with decode rows and a prompt
 *                                chunk runs its decode attention on a
 *                                second stream beside its prefill
 *                                attention                                default 0
 *   "cuda_prefill_wgmma_variant" int  that kernel's variant, for timing
 *                                runs: 0 the default tiles, 1-3 other KV
 *                                tiles and pipeline depths, 4-6 softmax
 *                                overlapped with the next tile's MMAs,
 *                                7 two CTAs per SM
 *                                (bf16 KV; fp8 KV runs 0 for 4-6)        default 0
 *   "cuda_decode_fp8_pair_tiles" int  fp8 KV decode attention in rounds of
 *                                32 positions with 16-byte code loads
 *                                (head_dim 128, blocks of 16+ positions):
 *                                1 on, 2 on with f16 products, 0 off,
 *                                -1 the library's choice (1)           default -1
 *   "cuda_gemv_bulk" int         the decode GEMV reading its weights
 *                                through the copy engine where the
 *                                whole matrix fits in shared memory:
 *                                1 on, 0 through registers, -1 the
 *                                library's choice (16-bit weights;
 *                                one row's fp8 codes up to 12 MiB)      default -1
 *   "cuda_moe_decode_fused" int  mixture-of-experts models' one-row
 *                                decode steps on three fused kernels:
 *                                1 on, 0 the grouped kernels, -1 the
 *                                library's choice (on)                  default -1
 *   "cuda_moe_down_bulk" int     that fused path's down+combine reading
 *                                its weights through the copy engine
 *                                where they fit: 1 on, 0 through
 *                                registers, -1 the library's choice
 *                                (16-bit experts)                       default -1
 *   "cuda_moe_skinny" int        mixture-of-experts models' prefill-
 *                                sized steps with their experts on the
 *                                grouped skinny tensor-core kernel
 *                                (compute capability 9.0): 1 on, 0 the
 *                                grouped tiles or library GEMMs, -1
 *                                the library's choice (on); steps big
 *                                enough for the library GEMMs run on
 *                                those either way                       default -1
 *   "cuda_l2_prefetch" int       one- and two-row decode steps asking
 *                                L2 for a projection's weights while
 *                                the short kernels before it run, a
 *                                sum of 1 (o, during QkvPost) and 2
 *                                (the next layer's qkv, during an MoE
 *                                router); 0 none, -1 the library's
 *                                choice (both)                          default -1
 *   "cuda_fp8_activations" int   fp8 weights: steps of 3+ rows quantize
 *                                activations per token to E4M3 and run
 *                                fp8 x fp8 projections (W8A8); 0 keeps
 *                                them 16-bit (W8A16)                      default 1
 *   "cuda_skinny_gemm"   int     decode-batch projections (3..128 rows,
 *                                bf16 compute, compute capability 9.0)
 *                                on the stream-K wgmma kernel where it is
 *                                faster: 0 off, 1 on, 2 on with the
 *                                overlapped pipeline for bf16 too, 3 on
 *                                every projection with the TMA pipeline   default 1
 *   "cuda_pdl_early"     int     short kernels between projections start
 *                                the next kernel before their own wait    default 1
 *   "cuda_gemv_prefetch" int     16-byte weight pieces per lane the decode
 *                                GEMV loads before its wait: 2, 4 or 8
 *                                (3 acts as 2, 5..7 as 4)                 default 4 */
typedef struct kvt_options kvt_options;

/** Creates an options object holding every default into *out. */
KVT_API kvt_status kvt_options_create(kvt_options** out);
KVT_API void kvt_options_free(kvt_options* options); /**< NULL is ignored */
/** Sets an integer option (any key above; sizes in bytes). */
KVT_API kvt_status kvt_options_set_int(kvt_options* options, const char* key, int64_t value);
/** Sets a string option, or an integer one from its text ("64MiB", "2GiB", "512"). */
KVT_API kvt_status kvt_options_set_string(kvt_options* options, const char* key,
                                          const char* value);
/** Message of the last failed setter on this object ("" if none). Valid until the next call
 * on the object. */
KVT_API const char* kvt_options_errmsg(const kvt_options* options);

/* ---------------------------------------------------------------- model */

/** A loaded checkpoint: config, weights (memory-mapped), tokenizer when present.
 * Reference-counted: contexts hold a reference, so kvt_model_free may be called at any
 * time after the last kvt_context_create that uses it. */
typedef struct kvt_model kvt_model;

/** Loads an HF checkpoint directory (config.json, *.safetensors or a sharded index) or a
 * GGUF file (llama.cpp's format; `directory` is then the file's path: its metadata gives
 * the config and the tokenizer, docs/GGUF.md says which architectures and tensor types).
 * Errors: KVT_ERR_NOT_FOUND (missing directory/file/tensor), KVT_ERR_CORRUPT (malformed
 * file), KVT_ERR_UNSUPPORTED (architecture or dtype), KVT_ERR_INVALID_ARGUMENT (null). */
KVT_API kvt_status kvt_model_load(const char* directory, kvt_model** out, char* errbuf,
                                  int32_t errbuf_len);
KVT_API void kvt_model_free(kvt_model* model); /**< drops the caller's reference; NULL ok */
/** Number of token ids in the vocabulary (ids are 0 .. size - 1). */
KVT_API int32_t kvt_model_vocab_size(const kvt_model* model);
/** Copies a JSON summary (architecture, shapes, weight bytes, KV bytes per token) into buf
 * (NUL-terminated when buf_len > 0); *out_len receives the full length without the NUL.
 * Features beyond the Llama shape appear only where the model has them, named as
 * `kvtier inspect` names them: "sliding_window" and "sliding_window_layers", soft-caps,
 * "experts" (count, per_token, intermediate_size, layers, active_parameters), and so on.
 * Its "generation_defaults" object holds the request defaults in force (see kvt_request):
 * do_sample, temperature, top_k, top_p, repetition_penalty, max_new_tokens, the
 * eos_token_ids of generation_config.json and from_generation_config (the fields the file
 * gave). */
KVT_API kvt_status kvt_model_info_json(const kvt_model* model, char* buf, int32_t buf_len,
                                       int32_t* out_len);

/** 1 when the model directory had a tokenizer.json (text in and out works), else 0. */
KVT_API int32_t kvt_model_has_tokenizer(const kvt_model* model);
/** Encodes UTF-8 text (text_len bytes) into token ids; special-token strings in the text are
 * recognised; add_special_tokens != 0 adds what the tokenizer's template adds (e.g. BOS).
 * Copies up to buf_len ids into buf; *out_len gets the total count (call with buf_len 0 to
 * size). Errors: KVT_ERR_UNSUPPORTED (no tokenizer), KVT_ERR_INVALID_ARGUMENT (invalid
 * UTF-8, NULL pointers); message in errbuf. */
KVT_API kvt_status kvt_model_tokenize(const kvt_model* model, const char* text, int32_t text_len,
                                      int32_t add_special_tokens, int32_t* buf, int32_t buf_len,
                                      int32_t* out_len, char* errbuf, int32_t errbuf_len);
/** Decodes ids into UTF-8 text copied into buf (NUL-terminated when buf_len > 0); *out_len
 * gets the full length. KVT_ERR_INVALID_ARGUMENT for an id outside the vocabulary. */
KVT_API kvt_status kvt_model_detokenize(const kvt_model* model, const int32_t* ids, int32_t num_ids,
                                        int32_t skip_special_tokens, char* buf, int32_t buf_len,
                                        int32_t* out_len, char* errbuf, int32_t errbuf_len);

/** The bytes token `id` adds to decoded text: a piece of UTF-8 text, or, for a byte token,
 * part of a character that the following tokens complete (which kvt_model_detokenize of the
 * token alone shows as U+FFFD) — each token's `bytes` as OpenAI's log-probabilities report
 * them. A special token (BOS, EOS, chat markers) gives its text. Copies them into buf
 * (NUL-terminated when buf_len > 0; the bytes may hold a NUL themselves); *out_len gets
 * their full count. Errors: KVT_ERR_UNSUPPORTED (no tokenizer), KVT_ERR_INVALID_ARGUMENT
 * (id outside the vocabulary, a NULL buffer with buf_len > 0). */
KVT_API kvt_status kvt_model_token_bytes(const kvt_model* model, int32_t id, char* buf, int32_t buf_len,
                                         int32_t* out_len);

/* ---------------------------------------------------------------- request */

/** Everything about one generation request except the context. Defaults: greedy
 * (temperature 0), top_k 0 (off), top_p 1, seed 0, max_new_tokens 16, no stop ids beyond
 * the model's eos ids, priority 0, ignore_eos 0, the default cache namespace — except where the model's
 * generation_config.json says otherwise: a field the request does not set takes the
 * checkpoint's value when the sequence is added, a field it sets always wins.
 * generation_config.json as transformers reads it: "do_sample": true gives the file's
 * temperature, top_k and top_p (1.0, 50 and 1.0 where the file has none); without
 * do_sample (or false) the default stays greedy and the file's top_k / top_p apply to a
 * request that sets a temperature; "max_new_tokens" and "repetition_penalty" are taken as
 * they are; "eos_token_id" (an integer or a list) stops sequences like the model's eos ids
 * (kvt_request_set_ignore_eos and kvt_request_set_stop_tokens override it). Other fields
 * are ignored. A known field of the wrong type or out of its setter's range makes
 * kvt_model_load fail with KVT_ERR_INVALID_ARGUMENT naming the field. The defaults in
 * force are in kvt_model_info_json and `kvtier inspect`. */
typedef struct kvt_request kvt_request;

/** Creates a request holding every default into *out. */
KVT_API kvt_status kvt_request_create(kvt_request** out);
KVT_API void kvt_request_free(kvt_request* request); /**< NULL is ignored */
/** Prompt token ids (copied). Must be non-empty; ids are checked against the vocabulary
 * when the request is added. */
KVT_API kvt_status kvt_request_set_prompt_tokens(kvt_request* request, const int32_t* tokens,
                                                 int32_t num_tokens);
/** Prompt as UTF-8 text (copied), tokenized with the model's tokenizer when added (BOS as the
 * tokenizer adds it). Replaces a previously set prompt of any kind. */
KVT_API kvt_status kvt_request_set_prompt_text(kvt_request* request, const char* text, int32_t text_len);
/** Appends a chat message (role "system", "user" or "assistant"); the prompt becomes the
 * model family's chat format (built-in templates: Llama-3, ChatML/Qwen, Mistral, Llama-2,
 * chosen by the checkpoint's chat template or marker tokens; ChatML, its markers as plain
 * text, for a model with neither, as llama.cpp does) with the assistant turn opened.
 * Replaces a token or text prompt. KVT_ERR_UNSUPPORTED when the model's chat template is
 * none of these (checked when the request is added). */
KVT_API kvt_status kvt_request_add_chat_message(kvt_request* request, const char* role, const char* content);
/** Adds a stop string (copied): generation stops when the decoded text contains it, matched
 * across token boundaries; the stop string itself is not part of the output text. Needs a
 * model with a tokenizer (KVT_ERR_INVALID_ARGUMENT when added otherwise). */
KVT_API kvt_status kvt_request_add_stop_string(kvt_request* request, const char* text, int32_t text_len);
KVT_API kvt_status kvt_request_set_max_new_tokens(kvt_request* request, int32_t n); /**< >= 1 */
KVT_API kvt_status kvt_request_set_temperature(kvt_request* request, float t);   /**< >= 0 */
KVT_API kvt_status kvt_request_set_top_k(kvt_request* request, int32_t k);       /**< >= 0 */
KVT_API kvt_status kvt_request_set_top_p(kvt_request* request, float p);         /**< (0, 1] */
/** Sampling seed: the same seed gives the same tokens. */
KVT_API kvt_status kvt_request_set_seed(kvt_request* request, int64_t seed);
/** Extra stop token ids (copied), in addition to the model's eos ids. */
KVT_API kvt_status kvt_request_set_stop_tokens(kvt_request* request, const int32_t* tokens,
                                               int32_t num_tokens);
/** When non-zero the model's eos ids do not stop the sequence (benchmarks). */
KVT_API kvt_status kvt_request_set_ignore_eos(kvt_request* request, int32_t ignore);
/** Higher runs first and is preempted last. */
KVT_API kvt_status kvt_request_set_priority(kvt_request* request, int32_t priority);
/** When non-zero, the prompt's full KV blocks stay on the device tier once computed (never
 * evicted, so later requests sharing the prefix always hit) until
 * kvt_context_unpin_prefixes. Pinned blocks reduce what other sequences can use. */
KVT_API kvt_status kvt_request_set_pin_prefix(kvt_request* request, int32_t pin);
/** Cache namespace (copied; "" is the default): prompt-prefix KV blocks are shared only
 * between requests of the same namespace, in every tier and across restarts over the same
 * disk file, so one tenant's requests never reuse (or learn, by timing) another's cached
 * prompts. It changes which blocks are shared, never the generated tokens. UTF-8 without
 * NUL, at most 256 bytes; KVT_ERR_INVALID_ARGUMENT otherwise (the request keeps its
 * previous namespace). */
KVT_API kvt_status kvt_request_set_cache_namespace(kvt_request* request, const char* ns);
/* The sampler chain. Per token, in this order: logit bias, repetition penalty, frequency
 * and presence penalties, then temperature, top-k, top-p, min-p and the draw
 * (transformers' processor and warper order; the penalties after the bias as in
 * transformers, frequency/presence after repetition as in vLLM). Bias and penalties apply to
 * greedy decoding too. The same chain runs on the CPU and on the GPU. */
/** Repetition penalty over the prompt and the generated tokens (transformers' semantics): a
 * token already in the context has its logit divided by the penalty when positive,
 * multiplied by it otherwise. Finite and > 0; 1 = off (the default, unless
 * generation_config.json gives one: see kvt_request). */
KVT_API kvt_status kvt_request_set_repetition_penalty(kvt_request* request, float penalty);
/** Presence penalty (OpenAI's semantics): subtracted from the logit of every token generated
 * at least once. In [-2, 2]; 0 = off (default). */
KVT_API kvt_status kvt_request_set_presence_penalty(kvt_request* request, float penalty);
/** Frequency penalty (OpenAI's semantics): subtracted from a token's logit once per time it
 * was generated. In [-2, 2]; 0 = off (default). */
KVT_API kvt_status kvt_request_set_frequency_penalty(kvt_request* request, float penalty);
/** min-p: of the tokens top-k and top-p keep, only those whose probability (at the
 * temperature) is at least min_p times the most likely one's. In [0, 1]; 0 = off (default). */
KVT_API kvt_status kvt_request_set_min_p(kvt_request* request, float min_p);
/** Logit bias: biases[i] is added to the logit of tokens[i] (both copied; replaces an earlier
 * bias; count 0 clears it). Tokens >= 0 and distinct (checked against the vocabulary when the
 * request is added); each bias in [-100, 100] (-100 in effect bans the token). */
KVT_API kvt_status kvt_request_set_logit_bias(kvt_request* request, const int32_t* tokens,
                                              const float* biases, int32_t count);

/* Log-probabilities are of the model's own distribution: log-softmax of the raw logits,
 * before the sampler chain (as OpenAI and vLLM report them by default, and as
 * transformers' compute_transition_scores gives on output_logits). For a request with a JSON
 * schema or a grammar, of the distribution the grammar leaves: tokens it does not allow are
 * masked first (they never appear among the alternatives). Alternatives are the most
 * likely tokens, most likely first (ties: lower id first). On the GPU they are computed from
 * the same logits the sampler reads, and only the numbers asked for are copied back. */
/** Log-probabilities of the generated tokens: top_n -1 = off (default); 0..20 = each token's
 * log-probability and its top_n most likely alternatives, read per event
 * (kvt_events_logprob, kvt_events_top_logprobs) or per sequence (kvt_sequence_logprobs,
 * kvt_sequence_top_logprobs). */
KVT_API kvt_status kvt_request_set_logprobs(kvt_request* request, int32_t top_n);
/** Prompt log-probabilities (scoring): top_n as kvt_request_set_logprobs, for every prompt
 * token from the second on, read with kvt_sequence_prompt_logprobs and
 * kvt_sequence_prompt_top_logprobs once computed. Such a request computes every prompt
 * position (it reuses no cached prefix). */
KVT_API kvt_status kvt_request_set_prompt_logprobs(kvt_request* request, int32_t top_n);
/** Parallel sampling: n completions of the prompt, 1..128 (default 1). kvt_sequence_add
 * returns the first completion's id; completion i (0-based) has id first + i and draws from
 * seed + i, so it equals the same request with n = 1 run alone with seed + i. The prompt is
 * computed once: the completions share its full KV blocks (the statistics count them once;
 * "parallel_sampling" says how many were shared) and get a copy of its last partial block.
 * Each completion is a sequence of its own: its own events, readers, cancel and release.
 * Prompt log-probabilities are reported on the first. kvt_generate refuses n > 1. */
KVT_API kvt_status kvt_request_set_n(kvt_request* request, int32_t n);

/** Structured output: the generated text must be JSON valid against this JSON schema
 * (copied; the subset tool definitions use — objects, arrays, strings with enum/const,
 * lengths and formats date/time/date-time/uuid/email/ipv4, numbers and integers with
 * ranges, booleans, null, anyOf/oneOf, $defs/$ref; docs/STRUCTURED_OUTPUT.md). Tokens the
 * schema does not allow are masked before sampling; eos is allowed only once the JSON is
 * complete, and the sequence ends with KVT_FINISH_REASON_GRAMMAR as soon as nothing more
 * can follow. NULL or "" removes the constraint; replaces a grammar set by
 * kvt_request_set_grammar. KVT_ERR_INVALID_ARGUMENT for a schema that is not valid JSON or
 * uses an unsupported keyword, kvt_request_errmsg naming where ("JSON schema at
 * #/properties/x: keyword 'pattern' is not supported"); the request is unchanged then.
 * The model needs a tokenizer (checked when the request is added). */
KVT_API kvt_status kvt_request_set_json_schema(kvt_request* request, const char* schema_json);
/** Structured output: the generated text must be a sentence of this grammar in llama.cpp's
 * GBNF syntax (copied; rule "root" starts it). As kvt_request_set_json_schema otherwise;
 * errors name the line and column ("GBNF line 3, column 9: rule 'x' is used but never
 * defined"). NULL or "" removes the constraint; replaces a JSON schema. */
KVT_API kvt_status kvt_request_set_grammar(kvt_request* request, const char* gbnf);
/** Message of the last failed setter on this request ("" if none). Valid until the next call
 * on the object. */
KVT_API const char* kvt_request_errmsg(const kvt_request* request);

/* ---------------------------------------------------------------- context */

/** One engine: KV pools, scheduler, sequences. The device pool is allocated whole here.
 * The host and disk tiers do not make creation wait, whatever their sizes: the host tier's
 * memory is reserved here and (CUDA) pinned on a background thread a chunk at a time; the
 * disk file is opened, locked and reserved up to its first 64 MiB here, the rest in the
 * background. Their budgets hold from the start (admission, capacity_bytes), and their
 * slots are used as they become ready (statistics tiers.host.ready_bytes and
 * tiers.disk.ready_bytes, updated each step): until then a swap that finds no ready slot
 * goes to the next tier or recomputes, as when the tier is full. A disk that fills up
 * before its file is reserved leaves the disk tier at what was reserved
 * (tiers.disk.preparation_error, io_errors); freeing the context stops the preparation.
 * On the CUDA backend, creation also runs warm-up forwards on a scratch block (kernel
 * loading, one captured decode graph per batch size; about 0.2 s for an 8B model on an
 * H200) so that the first request is as fast as the rest. */
typedef struct kvt_context kvt_context;

/** Errors: KVT_ERR_INVALID_ARGUMENT, KVT_ERR_UNSUPPORTED (backend not usable),
 * KVT_ERR_OUT_OF_MEMORY / KVT_ERR_CAPACITY (budgets cannot be allocated; a host_kv_bytes
 * above the machine's physical memory, or a disk tier larger than its file system's free
 * space, is refused at once, before anything is allocated), KVT_ERR_BUSY (disk_path is held
 * by another context, in this process or another: give each context its own file),
 * KVT_ERR_IO. Nothing is left allocated after an error. */
KVT_API kvt_status kvt_context_create(kvt_model* model, const kvt_options* options,
                                      kvt_context** out, char* errbuf, int32_t errbuf_len);
/** Frees the context and every sequence in it. NULL is ignored. Must not race a kvt_step. */
KVT_API void kvt_context_free(kvt_context* context);
/** Message of the last failed call on this context ("" if none). The pointer stays valid
 * until the next failing call on the context; from several threads use the _copy form. */
KVT_API const char* kvt_context_errmsg(const kvt_context* context);
/** Copies that message into buf (NUL-terminated when buf_len > 0); returns its full length. */
KVT_API int32_t kvt_context_errmsg_copy(const kvt_context* context, char* buf, int32_t buf_len);

/* ---------------------------------------------------------------- sequences */

/** Admits a sequence. On success *out_id receives its id (> 0, never reused in a context).
 * Errors: KVT_ERR_INVALID_ARGUMENT (no prompt, token out of vocabulary, ...),
 * KVT_ERR_CAPACITY (prompt + max_new_tokens can never fit in all tiers together),
 * KVT_ERR_BUSY (waiting queue full; nothing was added). */
KVT_API kvt_status kvt_sequence_add(kvt_context* context, const kvt_request* request,
                                    int64_t* out_id);
/** Cancels a waiting, running or paused sequence; its KV blocks are released by the next
 * kvt_step, which reports an event with KVT_FINISH_REASON_CANCELLED. Cancelling a finished
 * sequence is KVT_ERR_STATE; an unknown id is KVT_ERR_NOT_FOUND. */
KVT_API kvt_status kvt_sequence_cancel(kvt_context* context, int64_t id);
/** State and finish reason (KVT_FINISH_REASON_NONE while not finished). */
KVT_API kvt_status kvt_sequence_status(kvt_context* context, int64_t id, int32_t* state,
                                       int32_t* finish_reason);
/** Copies up to buf_len generated tokens (not the prompt) into buf; *out_len receives the
 * total number generated so far (may exceed buf_len). buf may be NULL when buf_len is 0. */
KVT_API kvt_status kvt_sequence_tokens(kvt_context* context, int64_t id, int32_t* buf,
                                       int32_t buf_len, int32_t* out_len);
/** Copies up to buf_len prompt tokens into buf as the sequence was added — a text prompt
 * tokenized, chat messages in the model's chat format — and *out_len receives the prompt's
 * length (OpenAI's prompt_tokens). buf may be NULL when buf_len is 0. */
KVT_API kvt_status kvt_sequence_prompt_tokens(kvt_context* context, int64_t id, int32_t* buf,
                                              int32_t buf_len, int32_t* out_len);
/** Copies the generated text so far (NUL-terminated when buf_len > 0); *out_len gets its full
 * length. Text never splits a UTF-8 character; a stop string is not included.
 * KVT_ERR_UNSUPPORTED when the model has no tokenizer. */
KVT_API kvt_status kvt_sequence_text(kvt_context* context, int64_t id, char* buf, int32_t buf_len,
                                     int32_t* out_len);
/** Why a sequence finished with KVT_FINISH_REASON_ERROR (e.g. it can never get the device
 * blocks its next chunk needs because pinned prefixes hold them), NUL-terminated when
 * buf_len > 0; *out_len gets the full length, 0 when it did not fail. */
KVT_API kvt_status kvt_sequence_error(kvt_context* context, int64_t id, char* buf, int32_t buf_len,
                                      int32_t* out_len);
/** Log-probabilities of the generated tokens so far (the request set kvt_request_set_logprobs):
 * up to buf_len into buf; *out_len gets how many there are. KVT_ERR_STATE when the request
 * did not ask for them. */
KVT_API kvt_status kvt_sequence_logprobs(kvt_context* context, int64_t id, float* buf, int32_t buf_len,
                                         int32_t* out_len);
/** The alternatives of generated token j (0-based), most likely first: up to buf_len
 * (token, log-probability) pairs into tokens and logprobs; *out_len gets how many there are.
 * KVT_ERR_STATE when the request did not ask; KVT_ERR_INVALID_ARGUMENT for j out of range. */
KVT_API kvt_status kvt_sequence_top_logprobs(kvt_context* context, int64_t id, int32_t j, int32_t* tokens,
                                             float* logprobs, int32_t buf_len, int32_t* out_len);
/** Prompt log-probabilities (the request set kvt_request_set_prompt_logprobs): entry j is the
 * log-probability of prompt token j + 1 given the tokens before it (the first token has
 * none). Up to buf_len into buf; *out_len gets how many are computed so far (the prompt's
 * length - 1 once it is computed). KVT_ERR_STATE when the request did not ask. */
KVT_API kvt_status kvt_sequence_prompt_logprobs(kvt_context* context, int64_t id, float* buf, int32_t buf_len,
                                                int32_t* out_len);
/** The alternatives at prompt entry j (as kvt_sequence_prompt_logprobs numbers them), as
 * kvt_sequence_top_logprobs gives them. */
KVT_API kvt_status kvt_sequence_prompt_top_logprobs(kvt_context* context, int64_t id, int32_t j,
                                                    int32_t* tokens, float* logprobs, int32_t buf_len,
                                                    int32_t* out_len);
/** Forgets a finished sequence's record (tokens, state). Records of finished sequences are
 * kept until released or until the context is freed. KVT_ERR_STATE if not finished. */
KVT_API kvt_status kvt_sequence_release(kvt_context* context, int64_t id);
/** Number of sequences not yet finished (waiting, running or paused). */
KVT_API int32_t kvt_context_num_unfinished(kvt_context* context);

/* ---------------------------------------------------------------- stepping */

/** Tokens and finishes reported by one kvt_step. Reused across steps: each kvt_step clears
 * it before filling it. */
typedef struct kvt_events kvt_events;

/** Creates an empty events object into *out. */
KVT_API kvt_status kvt_events_create(kvt_events** out);
KVT_API void kvt_events_free(kvt_events* events); /**< NULL is ignored */
/** Number of events the last kvt_step reported. */
KVT_API int32_t kvt_events_count(const kvt_events* events);
/** Event i (0 <= i < count): the sequence, the token it produced (KVT_NO_TOKEN for a
 * cancellation or failure reported without a token) and its finish reason (NONE while the
 * sequence goes on). Any output pointer may be NULL. */
KVT_API kvt_status kvt_events_get(const kvt_events* events, int32_t i, int64_t* seq_id,
                                  int32_t* token, int32_t* finish_reason);

/** The text that event i's token completed (UTF-8, may be empty; never a partial character),
 * as a pointer into the events object valid until the next kvt_step that fills it, and its
 * length. Empty when the model has no tokenizer. */
KVT_API kvt_status kvt_events_text(const kvt_events* events, int32_t i, const char** text, int32_t* text_len);

/** Event i's log-probability (its request set kvt_request_set_logprobs): *logprob gets the
 * token's log-probability, *num_top the number of alternatives. Either pointer may be NULL.
 * KVT_ERR_NOT_FOUND when the event carries none (not asked for, or no token). */
KVT_API kvt_status kvt_events_logprob(const kvt_events* events, int32_t i, float* logprob, int32_t* num_top);
/** Event i's alternatives, most likely first: up to buf_len (token, log-probability) pairs
 * into tokens and logprobs; *out_len gets how many there are. KVT_ERR_NOT_FOUND as
 * kvt_events_logprob. */
KVT_API kvt_status kvt_events_top_logprobs(const kvt_events* events, int32_t i, int32_t* tokens,
                                           float* logprobs, int32_t buf_len, int32_t* out_len);

/** Runs one scheduler iteration: admits, preempts/resumes, runs one forward over the
 * scheduled batch, samples, and reports the produced tokens in events (may be NULL).
 * Returns KVT_OK with zero events when no sequence is unfinished. Progress is guaranteed:
 * while sequences are unfinished every step computes some of them (a step may produce no
 * event while long prompts are prefilled in chunks), so a loop on
 * kvt_context_num_unfinished() ends; a sequence that can never run because pinned prefixes
 * hold the blocks it needs finishes with KVT_FINISH_REASON_ERROR. A failure of one sequence is
 * reported as its KVT_FINISH_REASON_ERROR event, not as the step's status; a non-OK status
 * means the step as a whole failed (backend error) and no sequence advanced. */
KVT_API kvt_status kvt_step(kvt_context* context, kvt_events* events);

/** Convenience: adds the request, steps the context until that sequence finishes (other
 * sequences progress too, their events are not reported), copies up to buf_len generated
 * tokens into buf, and releases the sequence's record. One completion only:
 * KVT_ERR_INVALID_ARGUMENT for a request with n > 1. *out_len gets the total generated,
 * *finish_reason (may be NULL) why it stopped. */
KVT_API kvt_status kvt_generate(kvt_context* context, const kvt_request* request, int32_t* buf,
                                int32_t buf_len, int32_t* out_len, int32_t* finish_reason);

/** Releases every pinned prefix of the context; the blocks stay cached but evictable. */
KVT_API kvt_status kvt_context_unpin_prefixes(kvt_context* context);

/* ---------------------------------------------------------------- statistics */

/** Copies the context statistics as a JSON object into buf (NUL-terminated when
 * buf_len > 0); *out_len gets the full length without the NUL. Call with buf_len 0 first to
 * size the buffer. The text can grow between two calls while the context runs (its
 * stepping and I/O threads move the counters), so the copy is whole only when
 * *out_len < buf_len; otherwise buf holds a cut-short text: call again with a larger
 * buffer. */
KVT_API kvt_status kvt_context_stats_json(kvt_context* context, char* buf, int32_t buf_len,
                                          int32_t* out_len);
/** One statistic by its JSON name (e.g. "steps", "tiers.gpu.used_bytes" for nested
 * fields). KVT_ERR_NOT_FOUND for an unknown name. */
KVT_API kvt_status kvt_context_stat(kvt_context* context, const char* name, int64_t* value);

/* ---------------------------------------------------------------- metrics */

/** Copies the context statistics in the Prometheus text exposition format (version 0.0.4)
 * into buf (NUL-terminated when buf_len > 0); *out_len gets the full length without the
 * NUL (call with buf_len 0 first to size the buffer; the text can grow between two calls
 * while the context runs, so the copy is whole only when *out_len < buf_len, and otherwise
 * is made again with a larger buffer). Serve it on /metrics as it is
 * (Content-Type: text/plain; version=0.0.4). Metric names begin with `kvtier_`: counters
 * (ending in `_total`), gauges (tier capacity and usage by tier label, sequences by state) and
 * histograms of time to first token, inter-token latency and step duration with fixed
 * buckets; docs/METRICS.md lists each metric, its statistic and the bucket layouts. The same
 * numbers are in kvt_context_stats_json ("histograms" holds the bucket counts). */
KVT_API kvt_status kvt_context_metrics_text(kvt_context* context, char* buf, int32_t buf_len,
                                            int32_t* out_len);

/* ---------------------------------------------------------------- logging */

/** Severity of a log message. */
typedef enum kvt_log_level {
  KVT_LOG_LEVEL_DEBUG = 0, /**< detail for chasing a problem */
  KVT_LOG_LEVEL_INFO = 1,  /**< a notable event in normal operation */
  KVT_LOG_LEVEL_WARN = 2,  /**< something went wrong and was handled (a fallback, a block
                                dropped, a write that failed); service goes on */
  KVT_LOG_LEVEL_ERROR = 3  /**< something failed that the caller will also see as an error */
} kvt_log_level;

/** Receives one log message: a kvt_log_level, and one line of UTF-8 text (no newline)
 * saying what happened and why, valid only during the call. */
typedef void (*kvt_log_fn)(void* user_data, int32_t level, const char* message);

/** Installs the process-wide log callback for messages at min_level (a kvt_log_level) and
 * above; callback NULL turns logging off (the default: the library writes nothing, to
 * stderr or anywhere, by itself). The callback may be called from any thread — the thread
 * of the call that logs, or the library's own disk I/O threads — and from several at once:
 * it must be thread-safe and return quickly, and must not call into kvtier: some messages
 * are logged while a context's internal lock is held (kvt_set_log_callback from inside
 * returns KVT_ERR_STATE; messages the library would log from inside are dropped). Once kvt_set_log_callback returns, the previous callback is not running and is
 * never called again, so its user_data may be freed. Messages: a backend fallback
 * ("auto" using the CPU, and why), a tier disabled by its options, a corrupt disk block
 * detected, a failed disk write, a disk index that could not be used.
 * Errors: KVT_ERR_INVALID_ARGUMENT (min_level outside the enum), KVT_ERR_STATE. */
KVT_API kvt_status kvt_set_log_callback(kvt_log_fn callback, void* user_data, int32_t min_level);

/* ---------------------------------------------------------------- progress */

/** Receives the progress of a long call, stage by stage: the stage's name and how much of
 * it is done out of total, in the stage's unit. Every stage reports done = 0 first and
 * done = total last; done never decreases in between. Called on the thread that made the
 * call. Return 0 to go on, anything else to cancel: the call then stops at once, frees what
 * it made and returns KVT_ERR_CANCELLED.
 * Stages of kvt_model_load_with_progress: "files" (safetensors or GGUF files opened), "tensors"
 * (tensors checked; reads a sample of each from disk), "tokenizer" (0 or 1).
 * Stages of kvt_context_create (kvt_options_set_progress_callback): "weights" (bytes of
 * weights converted or copied to the device), "kv_pools" (0 or 1), "warmup" (0 or 1). */
typedef int32_t (*kvt_progress_fn)(void* user_data, const char* stage, int64_t done, int64_t total);

/** kvt_model_load, reporting progress to progress (NULL: none) with user_data. Errors: those
 * of kvt_model_load, and KVT_ERR_CANCELLED. */
KVT_API kvt_status kvt_model_load_with_progress(const char* directory, kvt_progress_fn progress,
                                                void* user_data, kvt_model** out, char* errbuf,
                                                int32_t errbuf_len);
/** Makes kvt_context_create with these options report its progress to progress (NULL:
 * none) with user_data. */
KVT_API kvt_status kvt_options_set_progress_callback(kvt_options* options, kvt_progress_fn progress,
                                                     void* user_data);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_KVTIER_H_ */
