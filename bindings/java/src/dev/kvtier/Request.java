// One generation request: prompt and sampling settings. A plain Java object; a native
// kvt_request is built from it for each add, so one Request may be reused from any thread
// once it is no longer being modified.
package dev.kvtier;

import dev.kvtier.swig.SWIGTYPE_p_kvt_request;
import dev.kvtier.swig.SWIGTYPE_p_p_kvt_request;
import dev.kvtier.swig.kvtier;

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

  public Request() {}

  public Request(int... prompt) { prompt(prompt); }

  public Request prompt(int... tokens) { this.prompt = tokens.clone(); return this; }
  /** The prompt as text, tokenized by the model's tokenizer when added. */
  public Request promptText(String text) { this.promptText = text; return this; }

  /** Appends a chat message (role "system", "user" or "assistant"): the prompt becomes the
   *  model family's chat format with the assistant turn opened. */
  public Request chatMessage(String role, String content) {
    chat.add(new String[] {role, content});
    return this;
  }

  /** Stops generation when the decoded text contains this string (not part of the output). */
  public Request stopString(String text) { stopStrings.add(text); return this; }

  public Request maxNewTokens(int n) { this.maxNewTokens = n; return this; }
  public Request temperature(float t) { this.temperature = t; return this; }
  public Request topK(int k) { this.topK = k; return this; }
  public Request topP(float p) { this.topP = p; return this; }
  public Request seed(long seed) { this.seed = seed; return this; }
  public Request stopTokens(int... tokens) { this.stopTokens = tokens.clone(); return this; }
  public Request ignoreEos(boolean ignore) { this.ignoreEos = ignore; return this; }
  public Request priority(int priority) { this.priority = priority; return this; }

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
    } catch (RuntimeException ex) {
      kvtier.kvt_request_free(r);
      throw ex;
    }
    return r;
  }

  private static byte[] utf8(String s) {
    return s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
  }

  private static void check(SWIGTYPE_p_kvt_request r, int status) {
    Kvtier.check(status, kvtier.kvt_request_errmsg(r));
  }
}
