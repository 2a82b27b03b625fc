// Context options and generation requests: plain C# objects turned into native kvt_options /
// kvt_request only for the duration of one call. Not synchronised: one thread at a time.
using System;
using System.Collections.Generic;
using Kvtier.Native;

namespace Kvtier
{
    /// <summary>Options of a context: KV budgets per tier, backend, scheduling limits. Any key
    /// of kvt_options_set_int / kvt_options_set_string (kvtier.h) can be set; the named
    /// setters cover the common ones. Each setter returns this object, for chaining.</summary>
    public sealed class ContextOptions
    {
        private readonly List<KeyValuePair<string, object>> values = new List<KeyValuePair<string, object>>();

        /// <summary>Reports the progress of Context.Create to progress, which may cancel it
        /// (stages "weights", "kv_pools", "warmup"); null for none.</summary>
        public ContextOptions Progress(ProgressCallback progress) { ProgressCallback = progress; return this; }

        internal ProgressCallback ProgressCallback { get; private set; }

        /// <summary>Any key of kvt_options_set_int (see kvtier.h).</summary>
        public ContextOptions Set(string key, long value) { values.Add(new KeyValuePair<string, object>(key, value)); return this; }
        /// <summary>Any key of kvt_options_set_string; sizes accept "64MiB".</summary>
        public ContextOptions Set(string key, string value) { values.Add(new KeyValuePair<string, object>(key, value)); return this; }

        /// <summary>"auto" (CUDA when a GPU is usable, else CPU), "cpu" or "cuda".</summary>
        public ContextOptions Backend(string backend) => Set("backend", backend);
        /// <summary>CPU threads; 0 uses every core.</summary>
        public ContextOptions Threads(int threads) => Set("threads", threads);
        /// <summary>Device-tier KV budget in bytes (default: sized from the model's context and
        /// max_running, see kvtier.h).</summary>
        public ContextOptions GpuKvBytes(long bytes) => Set("gpu_kv_bytes", bytes);
        /// <summary>Host-tier KV budget in bytes; 0 (the default) turns the tier off.</summary>
        public ContextOptions HostKvBytes(long bytes) => Set("host_kv_bytes", bytes);
        /// <summary>Disk-tier KV budget in bytes; 0 (the default) turns the tier off.</summary>
        public ContextOptions DiskKvBytes(long bytes) => Set("disk_kv_bytes", bytes);
        /// <summary>The file backing the disk tier.</summary>
        public ContextOptions DiskPath(string path) => Set("disk_path", path);
        /// <summary>Tokens per KV block, 1..1024 (default 16).</summary>
        public ContextOptions BlockTokens(int tokens) => Set("block_tokens", tokens);
        /// <summary>Most sequences in one batch (default 256).</summary>
        public ContextOptions MaxRunning(int n) => Set("max_running", n);
        /// <summary>Bound of the waiting queue; beyond it Add throws Status.Busy (default 1024).</summary>
        public ContextOptions MaxWaiting(int n) => Set("max_waiting", n);

        /// <summary>A native kvt_options with these values; the caller disposes it.</summary>
        internal OptionsHandle ToNative()
        {
            SWIGTYPE_p_p_kvt_options box = kvtier.new_kvt_options_box();
            OptionsHandle o;
            try
            {
                KvtierException.Check(kvtier.kvt_options_create(box), "kvt_options_create");
                o = new OptionsHandle(kvtier.kvt_options_box_value(box));
            }
            finally
            {
                kvtier.delete_kvt_options_box(box);
            }
            try
            {
                foreach (var kv in values)
                {
                    int st = kv.Value is long l ? kvtier.kvt_options_set_int(o.Swig, kv.Key, l)
                                                : kvtier.kvt_options_set_string(o.Swig, kv.Key, (string)kv.Value);
                    KvtierException.Check(st, kvtier.kvt_options_errmsg(o.Swig));
                }
            }
            catch
            {
                o.Dispose();
                throw;
            }
            return o;
        }
    }

    /// <summary>One generation request: the prompt (token ids, text or chat messages), how many
    /// tokens to generate, sampling and stop conditions. Unset values keep the defaults: the
    /// model's generation_config.json where it has them (Model.InfoJson), else greedy and 16
    /// new tokens; the model's eos ids stop. A value set here always wins. Each setter
    /// returns this object, for chaining.</summary>
    public sealed class Request
    {
        private int[] prompt = new int[0];
        private int? maxNewTokens, topK, priority;
        private float? temperature, topP;
        private long? seed;
        private int[] stopTokens;
        private bool? ignoreEos, pinPrefix;
        private string promptText;
        private string jsonSchema, grammar;
        private readonly List<KeyValuePair<string, string>> chat = new List<KeyValuePair<string, string>>();
        private readonly List<string> stopStrings = new List<string>();
        private string cacheNamespace;
        private float? minP, repetitionPenalty, presencePenalty, frequencyPenalty;
        private Dictionary<int, float> logitBias;
        private int? logprobs, promptLogprobs;
        private int n = 1;

        /// <summary>A request whose prompt is these token ids (none: set a text or chat prompt).</summary>
        public Request(params int[] prompt) { this.prompt = (int[])prompt.Clone(); }

        /// <summary>The prompt as token ids.</summary>
        public Request Prompt(params int[] tokens) { prompt = (int[])tokens.Clone(); return this; }
        /// <summary>The prompt as text, tokenized by the model's tokenizer when added.</summary>
        public Request PromptText(string text) { promptText = text; return this; }
        /// <summary>Appends a chat message (role "system", "user" or "assistant").</summary>
        public Request ChatMessage(string role, string content) { chat.Add(new KeyValuePair<string, string>(role, content)); return this; }
        /// <summary>Stops generation when the decoded text contains this string.</summary>
        public Request StopString(string text) { stopStrings.Add(text); return this; }
        /// <summary>Tokens to generate at most, >= 1 (default: the model's, else 16).</summary>
        public Request MaxNewTokens(int n) { maxNewTokens = n; return this; }
        /// <summary>Sampling temperature, >= 0; 0 is greedy (default: the model's, else 0).</summary>
        public Request Temperature(float t) { temperature = t; return this; }
        /// <summary>Samples among the k most likely tokens; 0 is off (default: the model's, else 0).</summary>
        public Request TopK(int k) { topK = k; return this; }
        /// <summary>Nucleus sampling threshold in (0, 1]; 1 is off (default: the model's, else 1).</summary>
        public Request TopP(float p) { topP = p; return this; }
        /// <summary>Sampling seed: the same seed gives the same tokens.</summary>
        public Request Seed(long s) { seed = s; return this; }
        /// <summary>Extra stop token ids, in addition to the model's eos ids.</summary>
        public Request StopTokens(params int[] tokens) { stopTokens = (int[])tokens.Clone(); return this; }
        /// <summary>When true, the model's eos ids do not stop the sequence.</summary>
        public Request IgnoreEos(bool ignore) { ignoreEos = ignore; return this; }
        /// <summary>Higher runs first and is preempted last (default 0).</summary>
        public Request Priority(int p) { priority = p; return this; }
        /// <summary>Cache namespace (default ""): cached prompt prefixes are shared only between
        /// requests of the same namespace, so one tenant's requests never reuse another's. It
        /// never changes the generated tokens. At most 256 bytes of UTF-8, no NUL character;
        /// checked when the request is added (KvtierException, Status.InvalidArgument).</summary>
        public Request CacheNamespace(string ns) { cacheNamespace = ns; return this; }
        /// <summary>Structured output: the generated text must be JSON valid against this JSON
        /// schema (the subset tool definitions use); the sequence ends with FinishReason.Grammar
        /// once it is complete. Replaces a grammar; null removes the constraint. An unsupported
        /// schema throws KvtierException naming where, when the request is added.</summary>
        public Request JsonSchema(string schema) { jsonSchema = schema; grammar = null; return this; }
        /// <summary>Structured output: the generated text must be a sentence of this grammar in
        /// llama.cpp's GBNF syntax (rule root starts it); otherwise as JsonSchema.</summary>
        public Request Grammar(string gbnf) { grammar = gbnf; jsonSchema = null; return this; }
        /// <summary>Keeps the prompt's full KV blocks on the device tier once computed (never
        /// evicted) until Context.UnpinPrefixes.</summary>
        public Request PinPrefix(bool pin) { pinPrefix = pin; return this; }
        /// <summary>min-p in [0, 1]: keeps the tokens whose probability is at least this
        /// times the most likely one's; 0 (the default) is off.</summary>
        public Request MinP(float p) { minP = p; return this; }
        /// <summary>Repetition penalty over prompt and generated tokens (transformers'
        /// semantics), finite and &gt; 0; 1 is off. Unset: the model's generation_config.json
        /// default, else off.</summary>
        public Request RepetitionPenalty(float penalty) { repetitionPenalty = penalty; return this; }
        /// <summary>Presence penalty over generated tokens (OpenAI's semantics), in [-2, 2];
        /// 0 (the default) is off.</summary>
        public Request PresencePenalty(float penalty) { presencePenalty = penalty; return this; }
        /// <summary>Frequency penalty over generated tokens (OpenAI's semantics), in [-2, 2];
        /// 0 (the default) is off.</summary>
        public Request FrequencyPenalty(float penalty) { frequencyPenalty = penalty; return this; }
        /// <summary>Logit bias: token id to a bias in [-100, 100] added to its logit
        /// (copied; replaces an earlier one).</summary>
        public Request LogitBias(IDictionary<int, float> bias) { logitBias = new Dictionary<int, float>(bias); return this; }
        /// <summary>Reports each generated token's log-probability with topN (0..20)
        /// alternatives (Event.Logprobs, Context.Logprobs); -1 (the default) is off.</summary>
        public Request Logprobs(int topN) { logprobs = topN; return this; }
        /// <summary>Scores the prompt: each prompt token's log-probability from the second on
        /// with topN (0..20) alternatives (Context.PromptLogprobs); -1 (the default) is off.</summary>
        public Request PromptLogprobs(int topN) { promptLogprobs = topN; return this; }
        /// <summary>Parallel sampling: n (1..128) completions of the prompt sharing its KV
        /// blocks (Context.AddCompletions); completion i draws from the seed + i.</summary>
        public Request N(int n) { this.n = n; return this; }

        /// <summary>The number of sequences the request adds.</summary>
        internal int Completions => Math.Max(n, 1);

        /// <summary>A native kvt_request with these values; the caller disposes it.</summary>
        internal RequestHandle ToNative()
        {
            SWIGTYPE_p_p_kvt_request box = kvtier.new_kvt_request_box();
            RequestHandle handle;
            try
            {
                KvtierException.Check(kvtier.kvt_request_create(box), "kvt_request_create");
                handle = new RequestHandle(kvtier.kvt_request_box_value(box));
            }
            finally
            {
                kvtier.delete_kvt_request_box(box);
            }
            SWIGTYPE_p_kvt_request r = handle.Swig;
            try
            {
                if (prompt.Length > 0) Check(r, kvtier.kvt_request_set_prompt_tokens(r, prompt, prompt.Length));
                if (promptText != null)
                {
                    byte[] t = System.Text.Encoding.UTF8.GetBytes(promptText);
                    Check(r, kvtier.kvt_request_set_prompt_text(r, t, t.Length));
                }
                foreach (var m in chat) Check(r, kvtier.kvt_request_add_chat_message(r, m.Key, m.Value));
                foreach (string stop in stopStrings)
                {
                    byte[] t = System.Text.Encoding.UTF8.GetBytes(stop);
                    Check(r, kvtier.kvt_request_add_stop_string(r, t, t.Length));
                }
                if (maxNewTokens.HasValue) Check(r, kvtier.kvt_request_set_max_new_tokens(r, maxNewTokens.Value));
                if (temperature.HasValue) Check(r, kvtier.kvt_request_set_temperature(r, temperature.Value));
                if (topK.HasValue) Check(r, kvtier.kvt_request_set_top_k(r, topK.Value));
                if (topP.HasValue) Check(r, kvtier.kvt_request_set_top_p(r, topP.Value));
                if (seed.HasValue) Check(r, kvtier.kvt_request_set_seed(r, seed.Value));
                if (stopTokens != null) Check(r, kvtier.kvt_request_set_stop_tokens(r, stopTokens, stopTokens.Length));
                if (ignoreEos.HasValue) Check(r, kvtier.kvt_request_set_ignore_eos(r, ignoreEos.Value ? 1 : 0));
                if (priority.HasValue) Check(r, kvtier.kvt_request_set_priority(r, priority.Value));
                if (cacheNamespace != null)
                {
                    // A C string: a NUL inside would cut it short.
                    if (cacheNamespace.IndexOf('\0') >= 0)
                    {
                        throw new KvtierException((int)Status.InvalidArgument, "the cache namespace contains a NUL character");
                    }
                    byte[] ns = System.Text.Encoding.UTF8.GetBytes(cacheNamespace + "\0");
                    Check(r, kvtier.kvt_request_set_cache_namespace(r, ns));
                }
                if (jsonSchema != null) Check(r, kvtier.kvt_request_set_json_schema(r, Utf8z(jsonSchema)));
                if (grammar != null) Check(r, kvtier.kvt_request_set_grammar(r, Utf8z(grammar)));
                if (pinPrefix.HasValue) Check(r, kvtier.kvt_request_set_pin_prefix(r, pinPrefix.Value ? 1 : 0));
                if (minP.HasValue) Check(r, kvtier.kvt_request_set_min_p(r, minP.Value));
                if (repetitionPenalty.HasValue) Check(r, kvtier.kvt_request_set_repetition_penalty(r, repetitionPenalty.Value));
                if (presencePenalty.HasValue) Check(r, kvtier.kvt_request_set_presence_penalty(r, presencePenalty.Value));
                if (frequencyPenalty.HasValue) Check(r, kvtier.kvt_request_set_frequency_penalty(r, frequencyPenalty.Value));
                if (logitBias != null)
                {
                    int[] tokens = new int[logitBias.Count];
                    float[] biases = new float[logitBias.Count];
                    int i = 0;
                    foreach (var e in logitBias)
                    {
                        tokens[i] = e.Key;
                        biases[i++] = e.Value;
                    }
                    Check(r, kvtier.kvt_request_set_logit_bias(r, tokens, biases, tokens.Length));
                }
                if (logprobs.HasValue) Check(r, kvtier.kvt_request_set_logprobs(r, logprobs.Value));
                if (promptLogprobs.HasValue) Check(r, kvtier.kvt_request_set_prompt_logprobs(r, promptLogprobs.Value));
                if (n != 1) Check(r, kvtier.kvt_request_set_n(r, n));
            }
            catch
            {
                handle.Dispose();
                throw;
            }
            return handle;
        }

        // UTF-8 with the terminating NUL a C string needs.
        private static byte[] Utf8z(string s)
        {
            byte[] b = System.Text.Encoding.UTF8.GetBytes(s);
            Array.Resize(ref b, b.Length + 1);
            return b;
        }

        private static void Check(SWIGTYPE_p_kvt_request r, int status)
        {
            KvtierException.Check(status, kvtier.kvt_request_errmsg(r));
        }
    }
}
