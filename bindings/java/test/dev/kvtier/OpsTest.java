// JUnit 5 tests of logging, progress and cancellation, Prometheus metrics, prefix pinning,
// sequence errors and generation_config.json defaults through the Java binding.
package dev.kvtier;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class OpsTest {
  static final String MODEL = System.getenv("KVTIER_TEST_MODEL");

  static ContextOptions cpu() { return new ContextOptions().backend("cpu").threads(2); }

  @AfterEach
  void noLeaks() {
    assertEquals(0, Kvtier.liveHandles(), "native handles leaked");
  }

  @Test
  void libraryMessagesReachJavaUtilLogging() {
    List<LogRecord> records = new ArrayList<>();
    Handler handler = new Handler() {
      @Override public synchronized void publish(LogRecord r) { records.add(r); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    Logging.logger().addHandler(handler);
    try {
      Logging.setLevel(Level.INFO);
      try (Model m = Model.load(MODEL)) {
        Context.create(m, cpu().hostKvBytes(100)).close();
        Logging.setLevel(Level.OFF);
        int heard;
        synchronized (handler) {
          heard = records.size();
          assertTrue(records.stream().anyMatch(r -> r.getLevel() == Level.WARNING
              && r.getMessage().contains("host tier disabled") && r.getMessage().contains("host_kv_bytes 100")),
              "no WARNING about the host tier");
        }
        Context.create(m, cpu().hostKvBytes(100)).close();
        synchronized (handler) {
          assertEquals(heard, records.size(), "logged after Level.OFF");
        }
      }
    } finally {
      Logging.setLevel(Level.OFF);
      Logging.logger().removeHandler(handler);
    }
    assertEquals(Level.WARNING, Logging.julLevel(2));
    assertEquals(0, Logging.nativeLevel(Level.FINEST));
    assertEquals(3, Logging.nativeLevel(Level.SEVERE));
  }

  /** A corrupt disk block is found by the library's disk I/O thread, which logs it: the
   *  record reaches java.util.logging from a thread the JVM did not start. */
  @Test
  void messagesFromTheLibrarysOwnThreads(@TempDir Path dir) throws Exception {
    List<LogRecord> records = new ArrayList<>();
    Handler handler = new Handler() {
      @Override public synchronized void publish(LogRecord r) { records.add(r); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    Path disk = dir.resolve("kv.disk");
    ContextOptions options = cpu().blockTokens(4).diskKvBytes(16L << 20).diskPath(disk.toString());
    int[] prompt = new int[24];
    for (int i = 0; i < prompt.length; ++i) prompt[i] = 3 + (i * 37) % 200;
    Logging.logger().addHandler(handler);
    try (Model m = Model.load(MODEL)) {
      try (Context c = Context.create(m, options)) {
        c.generate(new Request(prompt).maxNewTokens(2).ignoreEos(true));
      }  // freeing the context writes its cached prefix blocks to the disk tier
      byte[] bytes = Files.readAllBytes(disk);
      for (int i = 200; i < bytes.length; i += 1024) bytes[i] ^= 0x10;
      Files.write(disk, bytes);
      Logging.setLevel(Level.WARNING);
      try (Context c = Context.create(m, options)) {
        c.generate(new Request(prompt).maxNewTokens(2).ignoreEos(true));
        assertTrue(c.stat("corrupt_blocks_detected") > 0, c.statsJson());
      }
    } finally {
      Logging.setLevel(Level.OFF);
      Logging.logger().removeHandler(handler);
    }
    synchronized (handler) {
      assertTrue(records.stream().anyMatch(r -> r.getLevel() == Level.WARNING
          && r.getMessage().contains("corrupt block detected")), "no record of the corrupt block");
    }
  }

  /** Each stage runs from 0 to its total, in the order given. */
  static void checkStages(List<Object[]> reports, String... want) {
    List<String> got = new ArrayList<>();
    for (int i = 0; i < reports.size(); ++i) {
      String stage = (String) reports.get(i)[0];
      long done = (Long) reports.get(i)[1], total = (Long) reports.get(i)[2];
      if (i == 0 || !reports.get(i - 1)[0].equals(stage)) {
        got.add(stage);
        assertEquals(0, done, stage);
      }
      if (i == reports.size() - 1 || !reports.get(i + 1)[0].equals(stage)) assertEquals(total, done, stage);
    }
    assertEquals(List.of(want), got);
  }

  @Test
  void progressAndCancellation() {
    List<Object[]> reports = new ArrayList<>();
    ProgressListener record = (stage, done, total) -> reports.add(new Object[] {stage, done, total});
    try (Model m = Model.load(MODEL, record)) {
      checkStages(reports, "files", "tensors", "tokenizer");
      KvtierException e = assertThrows(KvtierException.class,
          () -> Model.load(MODEL, (stage, done, total) -> !stage.equals("tensors")));
      assertEquals(Status.CANCELLED, e.status());
      assertTrue(e.getMessage().contains("tensors"), e.getMessage());

      reports.clear();
      Context.create(m, cpu().progress(record)).close();
      checkStages(reports, "weights", "kv_pools", "warmup");
      e = assertThrows(KvtierException.class,
          () -> Context.create(m, cpu().progress((stage, done, total) -> done == 0)));
      assertEquals(Status.CANCELLED, e.status());
      // What the listener throws cancels the call and comes out of it.
      IllegalStateException thrown = assertThrows(IllegalStateException.class,
          () -> Context.create(m, cpu().progress((stage, done, total) -> {
            throw new IllegalStateException("stop at " + stage);
          })));
      assertEquals("stop at weights", thrown.getMessage());
    }
  }

  @Test
  void metricsText() {
    try (Model m = Model.load(MODEL); Context c = Context.create(m, cpu())) {
      for (int i = 0; i < 2; ++i) c.generate(new Request(5, 6, 7).maxNewTokens(4).ignoreEos(true));
      String text = c.metricsText();
      assertTrue(text.contains("# TYPE kvtier_generated_tokens_total counter\nkvtier_generated_tokens_total 8\n"), text);
      assertTrue(text.contains("kvtier_time_to_first_token_seconds_count 2\n"), text);
      assertTrue(text.contains("kvtier_inter_token_latency_seconds_count 6\n"), text);
    }
  }

  // The text grows between the calls, by more than the slack of a buffer sized by the call
  // before: copied once more each time, it comes back whole, never cut short.
  @Test
  void copyGrowingTextCopiesAgainWhileTheTextGrows() {
    String[] text = new String[1];
    int[] calls = new int[1];
    String got = Context.copyGrowingText(buf -> {
      ++calls[0];
      text[0] = String.valueOf((char) ('a' + calls[0])).repeat(1000 * calls[0]);
      byte[] bytes = text[0].getBytes(java.nio.charset.StandardCharsets.UTF_8);
      int n = Math.min(bytes.length, buf.length - 1); // as the C API copies
      System.arraycopy(bytes, 0, buf, 0, n);
      buf[n] = 0;
      return bytes.length;
    });
    assertEquals(text[0], got, "after " + calls[0] + " calls");
  }

  @Test
  void pinPrefixAndSequenceError() throws Exception {
    try (Model m = Model.load(MODEL); Context c = Context.create(m, cpu().blockTokens(4))) {
      try (Sequence s = c.add(new Request(3, 4, 5, 6, 7, 8, 9, 10, 11).maxNewTokens(2).ignoreEos(true).pinPrefix(true))) {
        c.runUntilIdle();
        assertEquals("", s.errorMessage());
      }
      assertEquals(2, c.stat("pinned_blocks"));
      c.unpinPrefixes();
      assertEquals(0, c.stat("pinned_blocks"));
      assertEquals(Status.NOT_FOUND, assertThrows(KvtierException.class, () -> c.sequenceError(424242)).status());
    }
  }

  static Path withGenerationConfig(Path dir, String json) throws Exception {
    for (String f : new String[] {"config.json", "model.safetensors"}) {
      Files.createSymbolicLink(dir.resolve(f), Path.of(MODEL, f).toAbsolutePath());
    }
    Files.writeString(dir.resolve("generation_config.json"), json);
    return dir;
  }

  static int[] generateOn(String dir, Request request) {
    try (Model m = Model.load(dir); Context c = Context.create(m, cpu())) {
      return c.generate(request).tokens();
    }
  }

  @Test
  void generationConfigDefaults(@TempDir Path sampling, @TempDir Path bad) throws Exception {
    String dir = withGenerationConfig(sampling,
        "{\"do_sample\": true, \"temperature\": 1.3, \"top_k\": 20, \"max_new_tokens\": 7}").toString();
    try (Model m = Model.load(dir)) {
      assertTrue(m.infoJson().contains("\"max_new_tokens\":7"), m.infoJson());
    }
    int[] sampled = generateOn(dir, new Request(9, 8, 7, 6).seed(99).ignoreEos(true));
    int[] explicit = generateOn(MODEL,
        new Request(9, 8, 7, 6).seed(99).ignoreEos(true).temperature(1.3f).topK(20).maxNewTokens(7));
    assertEquals(7, sampled.length);
    assertArrayEquals(explicit, sampled);
    int[] greedy = generateOn(dir, new Request(9, 8, 7, 6).temperature(0).maxNewTokens(7).ignoreEos(true));
    assertArrayEquals(generateOn(MODEL, new Request(9, 8, 7, 6).maxNewTokens(7).ignoreEos(true)), greedy);
    String badDir = withGenerationConfig(bad, "{\"top_k\": \"many\"}").toString();
    KvtierException e = assertThrows(KvtierException.class, () -> Model.load(badDir));
    assertEquals(Status.INVALID_ARGUMENT, e.status());
    assertTrue(e.getMessage().contains("top_k"), e.getMessage());
  }
}
