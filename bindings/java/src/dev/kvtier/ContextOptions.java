// Options of a context (budgets, backend, ...): a plain Java object, applied to a native
// kvt_options when the context is created. Not synchronised: one thread at a time.
package dev.kvtier;

import dev.kvtier.swig.SWIGTYPE_p_kvt_options;
import dev.kvtier.swig.SWIGTYPE_p_p_kvt_options;
import dev.kvtier.swig.kvtier;
import java.util.LinkedHashMap;
import java.util.Map;

public final class ContextOptions {
  private final Map<String, Object> values = new LinkedHashMap<>();

  /** Any key of kvt_options_set_int (see kvtier.h). */
  public ContextOptions set(String key, long value) { values.put(key, value); return this; }

  /** Any key of kvt_options_set_string; sizes accept "64MiB". */
  public ContextOptions set(String key, String value) { values.put(key, value); return this; }

  public ContextOptions backend(String backend) { return set("backend", backend); }
  public ContextOptions threads(int threads) { return set("threads", threads); }
  public ContextOptions gpuKvBytes(long bytes) { return set("gpu_kv_bytes", bytes); }
  public ContextOptions hostKvBytes(long bytes) { return set("host_kv_bytes", bytes); }
  public ContextOptions diskKvBytes(long bytes) { return set("disk_kv_bytes", bytes); }
  public ContextOptions diskPath(String path) { return set("disk_path", path); }
  public ContextOptions blockTokens(int tokens) { return set("block_tokens", tokens); }
  public ContextOptions maxRunning(int n) { return set("max_running", n); }
  public ContextOptions maxWaiting(int n) { return set("max_waiting", n); }

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
