// One generation request: prompt and sampling settings. A plain Java object; a native
// kvt_request is built from it for each add, so one Request may be reused from any thread
// once it is no longer being modified.
package dev.kvtier;

import dev.kvtier.swig.SWIGTYPE_p_kvt_request;
import dev.kvtier.swig.SWIGTYPE_p_p_kvt_request;
import dev.kvtier.swig.kvtier;

/**
 * One generation request: the prompt (token ids, text or chat messages), how many tokens to
 * generate, sampling and stop conditions. Values not set keep the defaults: the model's
 * generation_config.json where it has them (see {@link Model#infoJson}), else greedy and 16
 * new tokens; the model's eos ids stop. A value set here always wins. Every setter returns this object, for
 * chaining.
 */
public final class Request {
  private int[] prompt = new int[0];
  private String promptText;
  private final java.util.List<String[]> chat = new java.util.ArrayList<>();
  private final java.util.List<String> stopStrings = new java.util.ArrayList<>();
  private Integer maxNewTokens;
  private Float temperature;
  private Integer topK;
  private Float topP;
  private Long seed;
  private int[] stopTokens;
  private Boolean ignoreEos;
  private Integer priority;
  private String cacheNamespace;
  private String jsonSchema;
  private String grammar;
  private Boolean pinPrefix;
  private Float minP;
  private Float repetitionPenalty;
  private Float presencePenalty;
  private Float frequencyPenalty;
  private java.util.Map<Integer, Float> logitBias;
  private Integer logprobs;
  private Integer promptLogprobs;
  private int n = 1;

  /** A request without a prompt yet. */
  public Request() {}

  /**
   * A request whose prompt is these token ids.
   *
   * @param prompt the prompt's token ids
   */
  public Request(int... prompt) { prompt(prompt); }

  /**
   * Sets the prompt as token ids.
   *
   * @param tokens the token ids (copied)
   * @return this
   */
  public Request prompt(int... tokens) { this.prompt = tokens.clone(); return this; }

  /**
   * Sets the prompt as text, tokenized by the model's tokenizer when the request is added.
   *
   * @param text the prompt
   * @return this
   */
  public Request promptText(String text) { this.promptText = text; return this; }

  /**
   * Appends a chat message: the prompt becomes the model family's chat format with the
   * assistant turn opened.
   *
   * @param role {@code "system"}, {@code "user"} or {@code "assistant"}
   * @param content the message
   * @return this
   */
  public Request chatMessage(String role, String content) {
    chat.add(new String[] {role, content});
    return this;
  }

  /**
   * Stops generation when the decoded text contains this string (which is not part of the
   * output). Needs a model with a tokenizer.
   *
   * @param text the stop string
   * @return this
   */
  public Request stopString(String text) { stopStrings.add(text); return this; }

  /**
   * Bounds the generated tokens (default: the model's, else 16).
   *
   * @param n at least 1
   * @return this
   */
  public Request maxNewTokens(int n) { this.maxNewTokens = n; return this; }

  /**
   * Sets the sampling temperature (default: the model's, else 0: greedy).
   *
   * @param t at least 0
   * @return this
   */
  public Request temperature(float t) { this.temperature = t; return this; }

  /**
   * Samples among the k most likely tokens (default: the model's, else 0: off).
   *
   * @param k at least 0
   * @return this
   */
  public Request topK(int k) { this.topK = k; return this; }

  /**
   * Sets the nucleus sampling threshold (default: the model's, else 1: off).
   *
   * @param p in (0, 1]
   * @return this
   */
  public Request topP(float p) { this.topP = p; return this; }

  /**
   * Sets the sampling seed: the same seed gives the same tokens.
   *
   * @param seed the seed
   * @return this
   */
  public Request seed(long seed) { this.seed = seed; return this; }

  /**
   * Adds stop token ids to the model's eos ids.
   *
   * @param tokens the token ids (copied)
   * @return this
   */
  public Request stopTokens(int... tokens) { this.stopTokens = tokens.clone(); return this; }

  /**
   * Whether the model's eos ids stop the sequence.
   *
   * @param ignore true: they do not
   * @return this
   */
  public Request ignoreEos(boolean ignore) { this.ignoreEos = ignore; return this; }

  /**
   * Sets the priority (default 0): higher runs first and is preempted last.
   *
   * @param priority the priority
   * @return this
   */
  public Request priority(int priority) { this.priority = priority; return this; }

  /**
   * Structured output: the generated text must be JSON valid against this JSON schema (the
   * subset tool definitions use). The sequence ends with {@link FinishReason#GRAMMAR} once
   * the JSON is complete. Replaces a grammar; {@code null} removes the constraint. A schema
   * that is not supported raises {@link KvtierException} naming where when the request is
   * added.
   *
   * @param schema the JSON schema text
   * @return this
   */
  public Request jsonSchema(String schema) { this.jsonSchema = schema; this.grammar = null; return this; }

  /**
   * Structured output: the generated text must be a sentence of this grammar, in llama.cpp's
   * GBNF syntax (rule {@code root} starts it); otherwise as {@link #jsonSchema}.
   *
   * @param gbnf the grammar text
   * @return this
   */
  public Request grammar(String gbnf) { this.grammar = gbnf; this.jsonSchema = null; return this; }

  /**
   * Keeps the prompt's full KV blocks on the device tier once computed (never evicted, so
   * later requests sharing the prefix always hit) until {@link Context#unpinPrefixes}.
   *
   * @param pin true to pin
   * @return this
   */
  public Request pinPrefix(boolean pin) { this.pinPrefix = pin; return this; }

  /**
   * Sets the cache namespace (default {@code ""}): cached prompt prefixes are shared only
   * between requests of the same namespace, so one tenant's requests never reuse another's.
   * It never changes the generated tokens. At most 256 bytes of UTF-8, no NUL character;
   * checked when the request is added ({@link KvtierException} with
   * {@link Status#INVALID_ARGUMENT}).
   *
   * @param namespace the namespace
   * @return this
   */
  public Request cacheNamespace(String namespace) { this.cacheNamespace = namespace; return this; }

  /**
   * min-p: keeps the tokens whose probability is at least this times the most likely
   * one's (default 0: off).
   *
   * @param p in [0, 1]
   * @return this
   */
  public Request minP(float p) { this.minP = p; return this; }

  /**
   * Repetition penalty over the prompt and generated tokens, transformers' semantics (1 is
   * off; unset: the model's generation_config.json default, else off).
   *
   * @param penalty finite and greater than 0
   * @return this
   */
  public Request repetitionPenalty(float penalty) { this.repetitionPenalty = penalty; return this; }

  /**
   * Presence penalty over the generated tokens, OpenAI's semantics (default 0: off).
   *
   * @param penalty in [-2, 2]
   * @return this
   */
  public Request presencePenalty(float penalty) { this.presencePenalty = penalty; return this; }

  /**
   * Frequency penalty over the generated tokens, OpenAI's semantics (default 0: off).
   *
   * @param penalty in [-2, 2]
   * @return this
   */
  public Request frequencyPenalty(float penalty) { this.frequencyPenalty = penalty; return this; }

  /**
   * Logit bias: each token's bias is added to its logit (replaces an earlier map).
   *
   * @param bias token id to bias in [-100, 100] (copied)
   * @return this
   */
  public Request logitBias(java.util.Map<Integer, Float> bias) {
    this.logitBias = new java.util.LinkedHashMap<>(bias);
    return this;
  }

  /**
   * Reports each generated token's log-probability with this many alternatives
   * ({@link Event#logprobs}, {@link Context#logprobs}).
   *
   * @param topN 0..20; -1 turns it off (the default)
   * @return this
   */
  public Request logprobs(int topN) { this.logprobs = topN; return this; }

  /**
   * Scores the prompt: each prompt token's log-probability from the second on, with this
   * many alternatives ({@link Context#promptLogprobs}).
   *
   * @param topN 0..20; -1 turns it off (the default)
   * @return this
   */
  public Request promptLogprobs(int topN) { this.promptLogprobs = topN; return this; }

  /**
   * Parallel sampling: this many completions of the prompt, sharing its KV blocks
   * ({@link Context#addCompletions}); completion i draws from the seed + i.
   *
   * @param n 1..128 (default 1)
   * @return this
   */
  public Request n(int n) { this.n = n; return this; }

  /** The number of sequences the request adds. */
  int completions() { return Math.max(n, 1); }

  /** A native kvt_request holding these values; the caller frees it. */
  SWIGTYPE_p_kvt_request toNative() {
    SWIGTYPE_p_p_kvt_request box = kvtier.new_kvt_request_box();
    SWIGTYPE_p_kvt_request r;
    try {
      Kvtier.check(kvtier.kvt_request_create(box), "kvt_request_create");
      r = kvtier.kvt_request_box_value(box);
    } finally {
      kvtier.delete_kvt_request_box(box);
    }
    try {
      if (prompt.length > 0) check(r, kvtier.kvt_request_set_prompt_tokens(r, prompt, prompt.length));
      if (promptText != null) check(r, kvtier.kvt_request_set_prompt_text(r, utf8(promptText)));
      for (String[] m : chat) check(r, kvtier.kvt_request_add_chat_message(r, m[0], m[1]));
      for (String stop : stopStrings) check(r, kvtier.kvt_request_add_stop_string(r, utf8(stop)));
      if (maxNewTokens != null) check(r, kvtier.kvt_request_set_max_new_tokens(r, maxNewTokens));
      if (temperature != null) check(r, kvtier.kvt_request_set_temperature(r, temperature));
      if (topK != null) check(r, kvtier.kvt_request_set_top_k(r, topK));
      if (topP != null) check(r, kvtier.kvt_request_set_top_p(r, topP));
      if (seed != null) check(r, kvtier.kvt_request_set_seed(r, seed));
      if (stopTokens != null) {
        check(r, kvtier.kvt_request_set_stop_tokens(r, stopTokens, stopTokens.length));
      }
      if (ignoreEos != null) check(r, kvtier.kvt_request_set_ignore_eos(r, ignoreEos ? 1 : 0));
      if (priority != null) check(r, kvtier.kvt_request_set_priority(r, priority));
      if (cacheNamespace != null) {
        // A C string: a NUL inside would cut it short, and name another namespace.
        if (cacheNamespace.indexOf('\0') >= 0) {
          throw new KvtierException(Status.INVALID_ARGUMENT.code(), "the cache namespace contains a NUL character");
        }
        check(r, kvtier.kvt_request_set_cache_namespace(r, utf8z(cacheNamespace)));
      }
      if (jsonSchema != null) check(r, kvtier.kvt_request_set_json_schema(r, utf8z(jsonSchema)));
      if (grammar != null) check(r, kvtier.kvt_request_set_grammar(r, utf8z(grammar)));
      if (pinPrefix != null) check(r, kvtier.kvt_request_set_pin_prefix(r, pinPrefix ? 1 : 0));
      if (minP != null) check(r, kvtier.kvt_request_set_min_p(r, minP));
      if (repetitionPenalty != null) {
        check(r, kvtier.kvt_request_set_repetition_penalty(r, repetitionPenalty));
      }
      if (presencePenalty != null) check(r, kvtier.kvt_request_set_presence_penalty(r, presencePenalty));
      if (frequencyPenalty != null) {
        check(r, kvtier.kvt_request_set_frequency_penalty(r, frequencyPenalty));
      }
      if (logitBias != null) {
        int[] tokens = new int[logitBias.size()];
        float[] biases = new float[logitBias.size()];
        int i = 0;
        for (java.util.Map.Entry<Integer, Float> e : logitBias.entrySet()) {
          tokens[i] = e.getKey();
          biases[i++] = e.getValue();
        }
        check(r, kvtier.kvt_request_set_logit_bias(r, tokens, biases, tokens.length));
      }
      if (logprobs != null) check(r, kvtier.kvt_request_set_logprobs(r, logprobs));
      if (promptLogprobs != null) check(r, kvtier.kvt_request_set_prompt_logprobs(r, promptLogprobs));
      if (n != 1) check(r, kvtier.kvt_request_set_n(r, n));
    } catch (RuntimeException ex) {
      kvtier.kvt_request_free(r);
      throw ex;
    }
    return r;
  }

  private static byte[] utf8(String s) {
    return s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
  }

  // UTF-8 with the terminating NUL a C string needs.
  private static byte[] utf8z(String s) {
    byte[] b = utf8(s);
    return java.util.Arrays.copyOf(b, b.length + 1);
  }

  private static void check(SWIGTYPE_p_kvt_request r, int status) {
    Kvtier.check(status, kvtier.kvt_request_errmsg(r));
  }
}
