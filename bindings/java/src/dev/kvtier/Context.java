// One engine: KV pools, scheduler, sequences. Thread-safety: add, cancel, the sequence
// readers and the statistics may be called from any thread while one thread drives step();
// close() waits for every call in progress and ends every open Sequence.
package dev.kvtier;

import dev.kvtier.swig.SWIGTYPE_p_kvt_context;
import dev.kvtier.swig.SWIGTYPE_p_kvt_events;
import dev.kvtier.swig.SWIGTYPE_p_kvt_options;
import dev.kvtier.swig.SWIGTYPE_p_kvt_request;
import dev.kvtier.swig.SWIGTYPE_p_p_kvt_context;
import dev.kvtier.swig.SWIGTYPE_p_p_kvt_events;
import dev.kvtier.swig.kvtier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.ReentrantLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * One engine: KV memory pools allocated whole at creation, a scheduler, sequences. One thread
 * drives it ({@link #step()}, {@link #runUntilIdle()}, {@link #generate}); any thread may add
 * and cancel sequences and read their state and the statistics. Close it when done: its
 * memory pools are freed at once.
 */
public final class Context implements AutoCloseable {
  private SWIGTYPE_p_kvt_context handle;
  private SWIGTYPE_p_kvt_events events;
  // Read lock: any call using the handle. Write lock: close().
  private final ReentrantReadWriteLock life = new ReentrantReadWriteLock();
  private final ReentrantLock stepper = new ReentrantLock();
  // Open sequences by id; guarded by itself. An add registers its Sequence while holding
  // it, and step() dispatches while holding it, so no event reaches an unknown id.
  private final Map<Long, Sequence> open = new HashMap<>();

  private Context(SWIGTYPE_p_kvt_context handle, SWIGTYPE_p_kvt_events events) {
    this.handle = handle;
    this.events = events;
  }

  /**
   * Creates a context: allocates its KV pools from the budgets.
   *
   * @param model the model (the context keeps its own reference)
   * @param options the options; null for the defaults
   * @return the context; close it when done
   * @throws KvtierException INVALID_ARGUMENT, UNSUPPORTED (backend), OUT_OF_MEMORY, CAPACITY
   */
  public static Context create(Model model, ContextOptions options) {
    SWIGTYPE_p_kvt_options o = (options == null ? new ContextOptions() : options).toNative();
    SWIGTYPE_p_p_kvt_context box = kvtier.new_kvt_context_box();
    SWIGTYPE_p_p_kvt_events ebox = kvtier.new_kvt_events_box();
    try {
      byte[] err = new byte[1024];
      ProgressListener listener = options == null ? null : options.progressListener();
      int status = listener == null
          ? kvtier.kvt_context_create(model.handle(), o, box, err, err.length)
          : kvtier.kvt_java_context_create_with_progress(model.handle(), o, listener, box, err, err.length);
      Kvtier.check(status, Kvtier.cString(err));
      SWIGTYPE_p_kvt_context c = kvtier.kvt_context_box_value(box);
      int st = kvtier.kvt_events_create(ebox);
      if (st != 0) {
        kvtier.kvt_context_free(c);
        Kvtier.check(st, "kvt_events_create");
      }
      return new Context(c, kvtier.kvt_events_box_value(ebox));
    } finally {
      kvtier.delete_kvt_events_box(ebox);
      kvtier.delete_kvt_context_box(box);
      kvtier.kvt_options_free(o);
    }
  }

  /**
   * Admits a sequence.
   *
   * @param request the request (copied: it may be reused); one completion
   * @return the sequence, whose events arrive as the context is stepped; close it when done
   * @throws KvtierException INVALID_ARGUMENT (also for n &gt; 1: use {@link #addCompletions}),
   *     CAPACITY (can never fit), BUSY (queue full)
   */
  public Sequence add(Request request) {
    if (request.completions() > 1) {
      throw new KvtierException(Status.INVALID_ARGUMENT.code(),
          "the request asks for n > 1 completions: use addCompletions");
    }
    return addCompletions(request).get(0);
  }

  /**
   * Admits the request's n completions, which share the prompt's KV blocks; completion i
   * draws from the seed + i and equals the request run alone with that seed and n = 1.
   *
   * @param request the request (copied: it may be reused)
   * @return one sequence per completion, ids consecutive; close each when done
   * @throws KvtierException INVALID_ARGUMENT, CAPACITY (can never fit), BUSY (queue full)
   */
  public List<Sequence> addCompletions(Request request) {
    SWIGTYPE_p_kvt_request r = request.toNative();
    try {
      SWIGTYPE_p_kvt_context c = acquire();
      try {
        long[] id = new long[1];
        synchronized (open) {
          check(kvtier.kvt_sequence_add(c, r, id));
          List<Sequence> out = new ArrayList<>();
          for (int i = 0; i < request.completions(); ++i) {
            Sequence s = new Sequence(this, id[0] + i);
            open.put(s.id(), s);
            out.add(s);
          }
          return out;
        }
      } finally {
        life.readLock().unlock();
      }
    } finally {
      kvtier.kvt_request_free(r);
    }
  }

  /**
   * Runs one scheduler iteration.
   *
   * @return its events (also delivered to their Sequences); empty when nothing is runnable
   * @throws KvtierException BACKEND when the step as a whole failed
   */
  public List<Event> step() {
    SWIGTYPE_p_kvt_context c = acquire();
    stepper.lock();
    try {
      check(kvtier.kvt_step(c, events));
      int n = kvtier.kvt_events_count(events);
      List<Event> out = new ArrayList<>(n);
      long[] seq = new long[1];
      int[] token = new int[1];
      int[] reason = new int[1];
      for (int i = 0; i < n; ++i) {
        Kvtier.check(kvtier.kvt_events_get(events, i, seq, token, reason), "kvt_events_get");
        out.add(new Event(seq[0], token[0], eventText(i), FinishReason.fromCode(reason[0]),
            eventLogprobs(i, token[0])));
      }
      synchronized (open) {
        for (Event e : out) {
          Sequence s = open.get(e.sequenceId());
          if (s != null && s.deliver(e) && s.closeRequested) {
            open.remove(e.sequenceId());
            kvtier.kvt_sequence_release(c, e.sequenceId());
          }
        }
      }
      return out;
    } finally {
      stepper.unlock();
      life.readLock().unlock();
    }
  }

  private byte[] textBuf = new byte[256]; // guarded by stepper

  private TokenLogprobs eventLogprobs(int i, int token) {
    float[] logprob = new float[1];
    int[] numTop = new int[1];
    if (kvtier.kvt_events_logprob(events, i, logprob, numTop) != 0) return null;
    int[] tokens = new int[numTop[0]];
    float[] values = new float[numTop[0]];
    if (numTop[0] > 0) {
      Kvtier.check(kvtier.kvt_events_top_logprobs(events, i, tokens, values, tokens.length, numTop),
          "kvt_events_top_logprobs");
    }
    return new TokenLogprobs(token, logprob[0], topOf(tokens, values, tokens.length));
  }

  private static List<TokenLogprob> topOf(int[] tokens, float[] values, int n) {
    List<TokenLogprob> top = new ArrayList<>(n);
    for (int j = 0; j < n; ++j) top.add(new TokenLogprob(tokens[j], values[j]));
    return List.copyOf(top);
  }

  /**
   * The log-probabilities of the tokens a sequence generated so far, with their
   * alternatives.
   *
   * @param id the sequence id
   * @return one entry per generated token
   * @throws KvtierException STATE when its request did not ask ({@link Request#logprobs})
   */
  public List<TokenLogprobs> logprobs(long id) {
    return logprobList(id, tokens(id), true);
  }

  /**
   * The log-probabilities of a sequence's prompt tokens from the second on (entry j scores
   * token j + 1), once computed, with their alternatives.
   *
   * @param id the sequence id
   * @return one entry per scored prompt token
   * @throws KvtierException STATE when its request did not ask ({@link Request#promptLogprobs})
   */
  public List<TokenLogprobs> promptLogprobs(long id) {
    return logprobList(id, new int[0], false);
  }

  private List<TokenLogprobs> logprobList(long id, int[] tokens, boolean generated) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] len = new int[1];
      float[] none = new float[0];
      check(generated ? kvtier.kvt_sequence_logprobs(c, id, none, 0, len)
                      : kvtier.kvt_sequence_prompt_logprobs(c, id, none, 0, len));
      float[] values = new float[len[0]];
      check(generated ? kvtier.kvt_sequence_logprobs(c, id, values, values.length, len)
                      : kvtier.kvt_sequence_prompt_logprobs(c, id, values, values.length, len));
      List<TokenLogprobs> out = new ArrayList<>(values.length);
      int[] topTokens = new int[20];
      float[] topValues = new float[20];
      for (int j = 0; j < values.length; ++j) {
        int[] n = new int[1];
        check(generated ? kvtier.kvt_sequence_top_logprobs(c, id, j, topTokens, topValues, 20, n)
                        : kvtier.kvt_sequence_prompt_top_logprobs(c, id, j, topTokens, topValues, 20, n));
        out.add(new TokenLogprobs(j < tokens.length ? tokens[j] : Event.NO_TOKEN, values[j],
            topOf(topTokens, topValues, Math.min(n[0], 20))));
      }
      return List.copyOf(out);
    } finally {
      life.readLock().unlock();
    }
  }

  private String eventText(int i) {
    int n = kvtier.kvt_events_text_copy(events, i, textBuf, textBuf.length);
    if (n < 0) throw new KvtierException(-n, "kvt_events_text");
    if (n >= textBuf.length) {
      textBuf = new byte[n + 1];
      kvtier.kvt_events_text_copy(events, i, textBuf, textBuf.length);
    }
    return new String(textBuf, 0, n, java.nio.charset.StandardCharsets.UTF_8);
  }

  /**
   * Steps until no sequence is unfinished.
   *
   * @return the number of steps
   */
  public int runUntilIdle() {
    int steps = 0;
    while (numUnfinished() > 0) {
      step();
      ++steps;
    }
    return steps;
  }

  /**
   * Blocking generation: adds the request and steps until it finishes (other sequences
   * progress too, and their events still reach their Sequences).
   *
   * @param request the request
   * @return the generated tokens and why generation stopped
   */
  public Generation generate(Request request) {
    try (Sequence s = add(request)) {
      while (!s.isFinished()) step();
      return new Generation(s.tokens(), s.finishReason());
    }
  }

  /**
   * Cancels a waiting, running or paused sequence; the next step reports it.
   *
   * @param id the sequence id
   * @throws KvtierException STATE when it has finished, NOT_FOUND for an unknown id
   */
  public void cancel(long id) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      check(kvtier.kvt_sequence_cancel(c, id));
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * Where a sequence is in its life.
   *
   * @param id the sequence id
   * @return its state
   */
  public SequenceState state(long id) {
    return SequenceState.fromCode(status(id)[0]);
  }

  /**
   * Why a sequence stopped.
   *
   * @param id the sequence id
   * @return {@link FinishReason#NONE} while it is not finished
   */
  public FinishReason finishReason(long id) {
    return FinishReason.fromCode(status(id)[1]);
  }

  private int[] status(long id) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] state = new int[1];
      int[] reason = new int[1];
      check(kvtier.kvt_sequence_status(c, id, state, reason));
      return new int[] {state[0], reason[0]};
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * The tokens generated so far by a sequence whose record is kept.
   *
   * @param id the sequence id
   * @return the generated tokens
   */
  public int[] tokens(long id) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] len = new int[1];
      check(kvtier.kvt_sequence_tokens(c, id, new int[0], 0, len));
      int[] buf = new int[len[0]];
      check(kvtier.kvt_sequence_tokens(c, id, buf, buf.length, len));
      return Arrays.copyOf(buf, Math.min(len[0], buf.length));
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * A sequence's prompt as it was added (a text prompt tokenized, chat messages in the model's
   * chat format), while its record is kept.
   *
   * @param id the sequence id
   * @return the prompt's tokens
   */
  public int[] promptTokens(long id) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] len = new int[1];
      check(kvtier.kvt_sequence_prompt_tokens(c, id, new int[0], 0, len));
      int[] buf = new int[len[0]];
      check(kvtier.kvt_sequence_prompt_tokens(c, id, buf, buf.length, len));
      return buf;
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * The text generated so far by a sequence whose record is kept.
   *
   * @param id the sequence id
   * @return the generated text
   * @throws KvtierException UNSUPPORTED when the model has no tokenizer
   */
  public String text(long id) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] len = new int[1];
      check(kvtier.kvt_sequence_text(c, id, new byte[1], 1, len));
      byte[] buf = new byte[len[0] + 1];
      check(kvtier.kvt_sequence_text(c, id, buf, buf.length, len));
      return new String(buf, 0, Math.min(len[0], buf.length - 1), java.nio.charset.StandardCharsets.UTF_8);
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * The sequences not yet finished.
   *
   * @return the number waiting, running or paused
   */
  public int numUnfinished() {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      return kvtier.kvt_context_num_unfinished(c);
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * The statistics: per-tier capacity and use, swaps, prefix hits, step times, ...
   *
   * @return a JSON object
   */
  public String statsJson() {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] len = new int[1];
      return copyGrowingText(buf -> {
        check(kvtier.kvt_context_stats_json(c, buf, buf.length, len));
        return len[0];
      });
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * One statistic.
   *
   * @param name its JSON name, nested names joined by dots, e.g. {@code "tiers.gpu.used_bytes"}
   * @return its value
   * @throws KvtierException NOT_FOUND for an unknown name
   */
  public long stat(String name) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      long[] value = new long[1];
      check(kvtier.kvt_context_stat(c, name, value));
      return value[0];
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * The statistics in the Prometheus text exposition format (version 0.0.4), to serve on
   * {@code /metrics} as they are: counters, gauges (tier usage) and histograms of time to
   * first token, inter-token latency and step duration.
   *
   * @return the exposition text
   */
  public String metricsText() {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] len = new int[1];
      return copyGrowingText(buf -> {
        check(kvtier.kvt_context_metrics_text(c, buf, buf.length, len));
        return len[0];
      });
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * Releases every prefix pinned by a request with {@link Request#pinPrefix}; the blocks stay
   * cached but become evictable.
   */
  public void unpinPrefixes() {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      check(kvtier.kvt_context_unpin_prefixes(c));
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * Why a sequence finished with {@link FinishReason#ERROR}.
   *
   * @param id the sequence id (its record must still be kept)
   * @return the reason, or "" when the sequence did not fail
   * @throws KvtierException NOT_FOUND for an unknown or released id
   */
  public String sequenceError(long id) {
    SWIGTYPE_p_kvt_context c = acquire();
    try {
      int[] len = new int[1];
      check(kvtier.kvt_sequence_error(c, id, new byte[1], 1, len));
      byte[] buf = new byte[len[0] + 1];
      check(kvtier.kvt_sequence_error(c, id, buf, buf.length, len));
      return Kvtier.cString(buf);
    } finally {
      life.readLock().unlock();
    }
  }

  /** Called by Sequence.close(): forget a finished sequence, or cancel a running one
   *  whose record step() releases when it finishes. */
  void closeSequence(Sequence s) {
    SWIGTYPE_p_kvt_context c;
    life.readLock().lock();
    try {
      c = handle;
      if (c == null) return;
      synchronized (open) {
        if (!open.containsKey(s.id())) return;
        if (s.isFinished()) {
          open.remove(s.id());
          kvtier.kvt_sequence_release(c, s.id());
        } else {
          s.closeRequested = true;
          kvtier.kvt_sequence_cancel(c, s.id());
        }
      }
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * Frees the context and its memory pools; open Sequences receive a final CANCELLED event.
   * Waits for calls in progress on other threads. Calling it again does nothing.
   */
  @Override
  public void close() {
    life.writeLock().lock();
    try {
      if (handle == null) return;
      synchronized (open) {
        for (Sequence s : open.values()) {
          s.deliver(new Event(s.id(), Event.NO_TOKEN, "", FinishReason.CANCELLED));
        }
        open.clear();
      }
      kvtier.kvt_events_free(events);
      kvtier.kvt_context_free(handle);
      events = null;
      handle = null;
    } finally {
      life.writeLock().unlock();
    }
  }

  /** Takes the read lock and returns the handle; throws if closed. */
  private SWIGTYPE_p_kvt_context acquire() {
    life.readLock().lock();
    if (handle == null) {
      life.readLock().unlock();
      throw new IllegalStateException("context is closed");
    }
    return handle;
  }

  /** A copy of a text of the C API into buf (NUL-terminated, cut short when it does not fit). */
  interface TextCopy {
    /** Copies the text into buf and returns its full length. */
    int copy(byte[] buf);
  }

  // The whole text `call` copies. The length a first call reports can be too small by the
  // time of the copy (the stepping and I/O threads move the counters in between, and a
  // number can gain a digit), so the copy is made again, in a buffer at least twice as
  // large, until the text fits.
  static String copyGrowingText(TextCopy call) {
    byte[] buf = new byte[1]; // the first call only sizes the text (the SWIG layer wants an array)
    for (;;) {
      int len = call.copy(buf);
      if (len < buf.length) { // all of it, and its NUL
        return new String(buf, 0, len, StandardCharsets.UTF_8);
      }
      // Room to spare, so a counter that grows between the calls rarely costs another copy.
      buf = new byte[Math.max(len + 1 + 256, 2 * buf.length)];
    }
  }

  private void check(int status) {
    if (status == 0) return;
    byte[] buf = new byte[1024];
    kvtier.kvt_context_errmsg_copy(handle, buf, buf.length);
    throw new KvtierException(status, Kvtier.cString(buf));
  }
}
