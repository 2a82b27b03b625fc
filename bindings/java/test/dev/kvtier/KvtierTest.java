// JUnit 5 tests of the Java binding, mirroring tests/c_api/c_api_test.c. The model directory
// comes from KVTIER_TEST_MODEL, the CLI used as the reference from KVTIER_CLI.
package dev.kvtier;

import static org.junit.jupiter.api.Assertions.*;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class KvtierTest {
  static final String MODEL = System.getenv("KVTIER_TEST_MODEL");

  static ContextOptions cpu() { return new ContextOptions().backend("cpu").threads(2); }

  @AfterEach
  void noLeaks() {
    assertEquals(0, Kvtier.liveHandles(), "native handles leaked");
  }

  @Test
  void version() {
    assertEquals(0, Kvtier.versionMajor());
    assertTrue(Kvtier.version().startsWith(Kvtier.versionMajor() + "."));
    assertEquals("KVT_ERR_BUSY", Kvtier.statusString(Status.BUSY.code()));
  }

  @Test
  void badInputRaisesWithMessage() {
    KvtierException e = assertThrows(KvtierException.class, () -> Model.load("/nonexistent/kvtier"));
    assertEquals(Status.NOT_FOUND, e.status());
    assertFalse(e.detail().isEmpty());
    try (Model m = Model.load(MODEL)) {
      e = assertThrows(KvtierException.class,
          () -> Context.create(m, cpu().blockTokens(0)).close());
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      assertTrue(e.getMessage().contains("block_tokens"), e.getMessage());
      e = assertThrows(KvtierException.class,
          () -> Context.create(m, cpu().set("no_such_option", 1)).close());
      assertTrue(e.getMessage().contains("no_such_option"), e.getMessage());
      try (Context c = Context.create(m, cpu())) {
        e = assertThrows(KvtierException.class, () -> c.add(new Request()));
        assertEquals(Status.INVALID_ARGUMENT, e.status());
        assertTrue(e.getMessage().contains("empty"), e.getMessage());
        e = assertThrows(KvtierException.class, () -> c.add(new Request(1, 1 << 30)));
        assertTrue(e.getMessage().contains("vocabulary"), e.getMessage());
        e = assertThrows(KvtierException.class, () -> c.add(new Request(1, 2).maxNewTokens(0)));
        assertTrue(e.getMessage().contains("max_new_tokens"), e.getMessage());
        e = assertThrows(KvtierException.class, () -> c.cancel(424242));
        assertEquals(Status.NOT_FOUND, e.status());
        e = assertThrows(KvtierException.class, () -> c.stat("no.such.stat"));
        assertEquals(Status.NOT_FOUND, e.status());
        assertEquals(0, c.numUnfinished());
      }
    }
  }

  @Test
  void cacheNamespacesShareNoPrefix() {
    int[] prompt = new int[40];  // two full blocks of 16, plus 8 tokens
    for (int i = 0; i < prompt.length; ++i) prompt[i] = 3 + (i * 7) % 200;
    try (Model m = Model.load(MODEL); Context c = Context.create(m, cpu())) {
      int[] a = c.generate(new Request(prompt).maxNewTokens(4).ignoreEos(true).cacheNamespace("tenant-a")).tokens();
      assertEquals(0, c.stat("prefix_hits.gpu"));
      int[] b = c.generate(new Request(prompt).maxNewTokens(4).ignoreEos(true).cacheNamespace("tenant-b")).tokens();
      assertEquals(0, c.stat("prefix_hits.gpu"));  // tenant-a's blocks are not tenant-b's
      int[] again = c.generate(new Request(prompt).maxNewTokens(4).ignoreEos(true).cacheNamespace("tenant-a")).tokens();
      assertEquals(2, c.stat("prefix_hits.gpu"));
      assertArrayEquals(a, b);  // a namespace never changes the tokens
      assertArrayEquals(a, again);
      // Any Unicode text is a namespace (sent as exact UTF-8); NUL and overlong ones are refused.
      c.generate(new Request(prompt).maxNewTokens(1).cacheNamespace("t\u00e9nant-\ud83d\ude00"));
      KvtierException e = assertThrows(KvtierException.class,
          () -> c.add(new Request(prompt).cacheNamespace("a\0b")));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      assertTrue(e.getMessage().contains("NUL"), e.getMessage());
      e = assertThrows(KvtierException.class, () -> c.add(new Request(prompt).cacheNamespace("x".repeat(257))));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      assertTrue(e.getMessage().contains("256"), e.getMessage());
      assertEquals(0, c.numUnfinished());
    }
  }

  /** Tokens the C API produces for the same request, via the kvtier CLI. */
  static int[] cliTokens(String promptIds, int maxTokens, float temperature, long seed)
      throws Exception {
    Process p = new ProcessBuilder(System.getenv("KVTIER_CLI"), "run", "--model", MODEL,
        "--prompt-ids", promptIds, "--max-tokens", String.valueOf(maxTokens), "--ignore-eos",
        "--backend", "cpu", "--temperature", String.valueOf(temperature), "--seed",
        String.valueOf(seed), "--json").redirectErrorStream(true).start();
    StringBuilder out = new StringBuilder();
    try (BufferedReader r = new BufferedReader(
        new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null;) out.append(line).append('\n');
    }
    assertEquals(0, p.waitFor(), out.toString());
    Matcher m = Pattern.compile("\"tokens\":\\s*\\[([^\\]]*)\\]").matcher(out);
    assertTrue(m.find(), out.toString());
    return Arrays.stream(m.group(1).split(",")).map(String::trim).filter(s -> !s.isEmpty())
        .mapToInt(Integer::parseInt).toArray();
  }

  @Test
  void generationEqualsTheCApi() throws Exception {
    int[] expectedGreedy = cliTokens("5,6,7,8,9", 8, 0f, 0);
    int[] expectedSampled = cliTokens("10,11,12,13,14", 8, 0.8f, 42);
    try (Model m = Model.load(MODEL)) {
      assertTrue(m.vocabSize() > 0);
      assertTrue(m.infoJson().contains("LlamaForCausalLM"));
      try (Context c = Context.create(m, cpu())) {
        m.close(); // the context keeps its own reference
        Generation g = c.generate(new Request(5, 6, 7, 8, 9).maxNewTokens(8).ignoreEos(true));
        assertArrayEquals(expectedGreedy, g.tokens());
        assertEquals(FinishReason.LENGTH, g.finishReason());

        // Streamed, alongside a cancelled sequence.
        Request sampled = new Request(10, 11, 12, 13, 14).maxNewTokens(8).ignoreEos(true)
            .temperature(0.8f).seed(42);
        try (Sequence s = c.add(sampled);
             Sequence other = c.add(new Request(20, 21, 22).maxNewTokens(8))) {
          assertEquals(SequenceState.WAITING, c.state(s.id()));
          other.cancel();
          c.runUntilIdle();
          List<Integer> streamed = new ArrayList<>();
          for (Event e : s) if (e.hasToken()) streamed.add(e.token());
          assertArrayEquals(expectedSampled, streamed.stream().mapToInt(i -> i).toArray());
          assertArrayEquals(expectedSampled, s.tokens());
          assertEquals(FinishReason.LENGTH, s.finishReason());
          assertEquals(FinishReason.CANCELLED,
              other.stream().reduce((a, b) -> b).get().finishReason());
          KvtierException e = assertThrows(KvtierException.class, other::cancel);
          assertEquals(Status.STATE, e.status());
        }
        assertTrue(c.statsJson().contains("\"tiers\""));
        assertEquals(0, c.stat("tiers.gpu.used_bytes"));
        assertTrue(c.stat("generated_tokens") >= 16);
      }
    }
  }

  @Test
  void textApi() {
    try (Model plain = Model.load(MODEL)) {
      assertFalse(plain.hasTokenizer());
      KvtierException e = assertThrows(KvtierException.class, () -> plain.tokenize("hi", false));
      assertEquals(Status.UNSUPPORTED, e.status());
    }
    try (Model m = Model.load(System.getenv("KVTIER_TEST_TEXT_MODEL"))) {
      assertTrue(m.hasTokenizer());
      String text = "h\u00e9llo \u2713 \ud83d\ude42"; // 1-, 2-, 3- and 4-byte UTF-8 characters
      int[] ids = m.tokenize(text, false);
      assertEquals(text.getBytes(StandardCharsets.UTF_8).length, ids.length); // bytes, no merges
      assertEquals(text, m.detokenize(ids, false));
      assertTrue(m.tokenize(text, true).length > ids.length); // BOS
      KvtierException e = assertThrows(KvtierException.class,
          () -> m.detokenize(new int[] {1 << 30}, false));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      // Each byte token's own bytes, the parts of characters included: together, the text.
      java.io.ByteArrayOutputStream pieces = new java.io.ByteArrayOutputStream();
      for (int id : ids) pieces.writeBytes(m.tokenBytes(id));
      assertArrayEquals(text.getBytes(StandardCharsets.UTF_8), pieces.toByteArray());
      assertTrue(m.tokenBytes(m.tokenize(text, true)[0]).length > 0); // BOS: its text
      e = assertThrows(KvtierException.class, () -> m.tokenBytes(1 << 30));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      try (Context c = Context.create(m, cpu())) {
        Generation byIds = c.generate(new Request(m.tokenize("Hello", true)).maxNewTokens(6)
            .ignoreEos(true));
        try (Sequence s = c.add(new Request().promptText("Hello").maxNewTokens(6).ignoreEos(true))) {
          c.runUntilIdle();
          StringBuilder streamed = new StringBuilder();
          for (Event ev : s) streamed.append(ev.text());
          assertArrayEquals(byIds.tokens(), s.tokens());
          assertEquals(s.text(), streamed.toString());
          assertArrayEquals(m.tokenize("Hello", true), s.promptTokens());
        }
      }
    }
  }

  /** A GGUF file loads as the checkpoint directory it holds: the same model writes the same text. */
  @Test
  void ggufModel() {
    List<String> texts = new ArrayList<>();
    for (String path : List.of(System.getenv("KVTIER_TEST_TEXT_MODEL"), System.getenv("KVTIER_TEST_TEXT_GGUF"))) {
      try (Model m = Model.load(path); Context c = Context.create(m, cpu())) {
        assertTrue(m.hasTokenizer(), path);
        assertEquals(258, m.vocabSize(), path);
        Generation g = c.generate(new Request().promptText("Tiers at work").maxNewTokens(12).ignoreEos(true));
        assertEquals(12, g.tokens().length, path);
        texts.add(m.detokenize(g.tokens(), false));
      }
    }
    assertEquals(texts.get(0), texts.get(1));
  }

  @Test
  void structuredOutput() {
    try (Model m = Model.load(System.getenv("KVTIER_TEST_TEXT_MODEL"));
        Context c = Context.create(m, cpu())) {
      KvtierException e = assertThrows(KvtierException.class,
          () -> c.add(new Request().promptText("x").jsonSchema("{\"type\":\"string\",\"pattern\":\"a\"}")));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      assertTrue(e.getMessage().contains("'pattern' is not supported"), e.getMessage());
      e = assertThrows(KvtierException.class, () -> c.add(new Request().promptText("x").grammar("root ::= nothing\n")));
      assertTrue(e.getMessage().contains("GBNF line 1, column 10"), e.getMessage());
      for (long seed = 1; seed <= 3; ++seed) {
        try (Sequence s = c.add(new Request().promptText("Answer:").temperature(1).seed(seed)
            .maxNewTokens(32).grammar("root ::= \"yes\" | \"no\" | \"\u00e9t\u00e9 \ud83d\ude42\"\n"))) {
          c.runUntilIdle();
          for (Event ev : s) { }
          assertEquals(FinishReason.GRAMMAR, s.finishReason());
          assertTrue(List.of("yes", "no", "\u00e9t\u00e9 \ud83d\ude42").contains(s.text()), s.text());
        }
      }
      String schema = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},"
          + "\"required\":[\"ok\"],\"additionalProperties\":false}";
      Generation g = c.generate(new Request().promptText("JSON:").temperature(1).maxNewTokens(64).jsonSchema(schema));
      assertEquals(FinishReason.GRAMMAR, g.finishReason());
      String text = m.detokenize(g.tokens(), true);
      assertTrue(text.matches("\\{\\s*\"ok\"\\s*:\\s*(true|false)\\s*\\}"), text);
    }
  }

  @Test
  void manyThreadsAddAndCancelWhileOneSteps() throws Exception {
    final int threads = 8;
    final int perThread = 12;
    try (Model m = Model.load(MODEL);
         Context c = Context.create(m, cpu().set("max_waiting", 4096))) {
      AtomicBoolean done = new AtomicBoolean();
      AtomicInteger finished = new AtomicInteger();
      AtomicInteger cancelled = new AtomicInteger();
      ConcurrentHashMap<Long, FinishReason> reasons = new ConcurrentHashMap<>();
      Thread driver = new Thread(() -> {
        while (!done.get() || c.numUnfinished() > 0) {
          if (c.step().isEmpty()) Thread.onSpinWait();
        }
      });
      driver.start();
      List<Thread> workers = new ArrayList<>();
      List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
      for (int t = 0; t < threads; ++t) {
        final int seed = t;
        Thread w = new Thread(() -> {
          try {
            for (int i = 0; i < perThread; ++i) {
              try (Sequence s = c.add(new Request(1 + seed, 2 + i, 3).maxNewTokens(4 + i % 5)
                  .ignoreEos(true))) {
                if (i % 3 == 0) {
                  try {
                    s.cancel();
                  } catch (KvtierException e) {
                    assertEquals(Status.STATE, e.status()); // it finished first
                  }
                }
                if (i % 4 == 1) continue; // closed while running: cancelled and released
                Event last = s.stream().reduce((a, b) -> b).get();
                reasons.put(s.id(), last.finishReason());
                if (last.finishReason() == FinishReason.CANCELLED) cancelled.incrementAndGet();
                else if (last.finishReason() == FinishReason.LENGTH) finished.incrementAndGet();
              }
            }
          } catch (Throwable e) {
            errors.add(e);
          }
        });
        workers.add(w);
        w.start();
      }
      for (Thread w : workers) w.join();
      done.set(true);
      driver.join();
      assertTrue(errors.isEmpty(), errors.toString());
      assertEquals(0, c.numUnfinished());
      assertEquals(reasons.size(), finished.get() + cancelled.get(), reasons.toString());
      assertTrue(finished.get() > 0);
    }
  }
}
