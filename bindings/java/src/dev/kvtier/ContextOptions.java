// Options of a context (budgets, backend, ...): a plain Java object, applied to a native
// kvt_options when the context is created. Not synchronised: one thread at a time.
package dev.kvtier;

import dev.kvtier.swig.SWIGTYPE_p_kvt_options;
import dev.kvtier.swig.SWIGTYPE_p_p_kvt_options;
import dev.kvtier.swig.kvtier;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Options of a {@link Context}: KV budgets per tier, backend, scheduling limits. Any key of
 * {@code kvt_options_set_int} / {@code kvt_options_set_string} (kvtier.h) can be set; the
 * named setters cover the common ones. Every setter returns this object, for chaining.
 */
public final class ContextOptions {
  private final Map<String, Object> values = new LinkedHashMap<>();
  private ProgressListener progress;

  /** Options with every value at the library's default. */
  public ContextOptions() {}

  /**
   * Sets an integer option.
   *
   * @param key any key of {@code kvt_options_set_int}, e.g. {@code "max_tokens_per_step"}
   * @param value its value (checked when the context is created)
   * @return this
   */
  public ContextOptions set(String key, long value) { values.put(key, value); return this; }

  /**
   * Sets a string option.
   *
   * @param key any key of {@code kvt_options_set_string}, e.g. {@code "preemption"}
   * @param value its value; sizes accept units, e.g. {@code "64MiB"}
   * @return this
   */
  public ContextOptions set(String key, String value) { values.put(key, value); return this; }

  /**
   * Chooses the backend.
   *
   * @param backend {@code "auto"} (CUDA when a GPU is usable, else the CPU), {@code "cpu"} or
   *     {@code "cuda"}
   * @return this
   */
  public ContextOptions backend(String backend) { return set("backend", backend); }

  /**
   * Sets the CPU backend's threads.
   *
   * @param threads the thread count; 0 uses every core
   * @return this
   */
  public ContextOptions threads(int threads) { return set("threads", threads); }

  /**
   * Sets the device-tier KV budget (default: sized from the model's context and max_running,
   * see kvtier.h).
   *
   * @param bytes the budget in bytes
   * @return this
   */
  public ContextOptions gpuKvBytes(long bytes) { return set("gpu_kv_bytes", bytes); }

  /**
   * Sets the host-tier KV budget (default 0: no host tier).
   *
   * @param bytes the budget in bytes
   * @return this
   */
  public ContextOptions hostKvBytes(long bytes) { return set("host_kv_bytes", bytes); }

  /**
   * Sets the disk-tier KV budget (default 0: no disk tier).
   *
   * @param bytes the budget in bytes
   * @return this
   */
  public ContextOptions diskKvBytes(long bytes) { return set("disk_kv_bytes", bytes); }

  /**
   * Sets the file backing the disk tier.
   *
   * @param path the file (created or reused)
   * @return this
   */
  public ContextOptions diskPath(String path) { return set("disk_path", path); }

  /**
   * Sets the tokens per KV block (default 16).
   *
   * @param tokens 1..1024
   * @return this
   */
  public ContextOptions blockTokens(int tokens) { return set("block_tokens", tokens); }

  /**
   * Bounds the sequences in one batch (default 256).
   *
   * @param n the bound
   * @return this
   */
  public ContextOptions maxRunning(int n) { return set("max_running", n); }

  /**
   * Bounds the waiting queue (default 1024); beyond it {@link Context#add} throws
   * {@link Status#BUSY}.
   *
   * @param n the bound, at least 1
   * @return this
   */
  public ContextOptions maxWaiting(int n) { return set("max_waiting", n); }

  /**
   * Reports the progress of {@link Context#create} to a listener that may cancel it.
   *
   * @param listener hears the stages "weights", "kv_pools" and "warmup"; null for none
   * @return this
   */
  public ContextOptions progress(ProgressListener listener) { this.progress = listener; return this; }

  /** The progress listener, or null. */
  ProgressListener progressListener() { return progress; }

  /** A native kvt_options holding these values; the caller frees it. */
  SWIGTYPE_p_kvt_options toNative() {
    SWIGTYPE_p_p_kvt_options box = kvtier.new_kvt_options_box();
    SWIGTYPE_p_kvt_options o;
    try {
      Kvtier.check(kvtier.kvt_options_create(box), "kvt_options_create");
      o = kvtier.kvt_options_box_value(box);
    } finally {
      kvtier.delete_kvt_options_box(box);
    }
    try {
      for (Map.Entry<String, Object> e : values.entrySet()) {
        int st = e.getValue() instanceof Long
            ? kvtier.kvt_options_set_int(o, e.getKey(), (Long) e.getValue())
            : kvtier.kvt_options_set_string(o, e.getKey(), (String) e.getValue());
        Kvtier.check(st, kvtier.kvt_options_errmsg(o));
      }
    } catch (RuntimeException ex) {
      kvtier.kvt_options_free(o);
      throw ex;
    }
    return o;
  }
}
