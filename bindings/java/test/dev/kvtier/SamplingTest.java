// JUnit 5 tests of the sampler chain, log-probabilities and parallel sampling in the Java
// binding: the CLI's tokens for the same request, log-probabilities on events and from the
// context alike, completions equal to their solo runs, inputs refused naming the field.
package dev.kvtier;

import static org.junit.jupiter.api.Assertions.*;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class SamplingTest {
  static final String MODEL = System.getenv("KVTIER_TEST_MODEL");

  @AfterEach
  void noLeaks() {
    assertEquals(0, Kvtier.liveHandles(), "native handles leaked");
  }

  static Request controls(long seed) {
    return new Request(5, 6, 7, 8, 9, 5, 6).maxNewTokens(6).ignoreEos(true).temperature(0.9f)
        .seed(seed).minP(0.01f).repetitionPenalty(1.2f).presencePenalty(0.5f).frequencyPenalty(0.5f)
        .logitBias(Map.of(11, 1.5f)).logprobs(3);
  }

  static int[] cliTokens() throws Exception {
    Process p = new ProcessBuilder(System.getenv("KVTIER_CLI"), "run", "--model", MODEL,
        "--prompt-ids", "5,6,7,8,9,5,6", "--max-tokens", "6", "--ignore-eos", "--backend", "cpu",
        "--temperature", "0.9", "--seed", "40", "--min-p", "0.01", "--repetition-penalty", "1.2",
        "--presence-penalty", "0.5", "--frequency-penalty", "0.5", "--logit-bias", "11:1.5",
        "--json").redirectErrorStream(true).start();
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
  void controlsAndLogprobs() throws Exception {
    int[] expected = cliTokens();
    try (Model m = Model.load(MODEL); Context c = Context.create(m, KvtierTest.cpu())) {
      try (Sequence s = c.add(controls(40).promptLogprobs(2))) {
        c.runUntilIdle();
        List<Integer> tokens = new ArrayList<>();
        List<TokenLogprobs> fromEvents = new ArrayList<>();
        for (Event e : s) {
          if (!e.hasToken()) continue;
          tokens.add(e.token());
          fromEvents.add(e.logprobs());
        }
        assertArrayEquals(expected, tokens.stream().mapToInt(i -> i).toArray());
        List<TokenLogprobs> stored = c.logprobs(s.id());
        assertEquals(fromEvents, stored);
        for (TokenLogprobs lp : stored) {
          assertEquals(3, lp.top().size());
          assertTrue(lp.logprob() <= 0f && lp.top().get(0).logprob() >= lp.top().get(2).logprob());
        }
        List<TokenLogprobs> prompt = c.promptLogprobs(s.id());
        assertEquals(6, prompt.size());
        assertEquals(2, prompt.get(0).top().size());
        assertEquals(Event.NO_TOKEN, prompt.get(0).token());
      }
      try (Sequence plain = c.add(new Request(5, 6).maxNewTokens(1))) {
        List<Event> events = c.step();
        assertNull(events.get(0).logprobs());
        KvtierException e = assertThrows(KvtierException.class, () -> c.logprobs(plain.id()));
        assertEquals(Status.STATE, e.status());
      }
      Object[][] bad = {
          {new Request(5).repetitionPenalty(-1f), "repetition_penalty"},
          {new Request(5).presencePenalty(3f), "presence_penalty"},
          {new Request(5).frequencyPenalty(Float.NaN), "frequency_penalty"},
          {new Request(5).minP(2f), "min_p"},
          {new Request(5).logitBias(Map.of(-1, 1f)), "negative"},
          {new Request(5).logitBias(Map.of(1 << 30, 1f)), "vocabulary"},
          {new Request(5).logprobs(21), "logprobs"},
          {new Request(5).promptLogprobs(-2), "prompt_logprobs"},
          {new Request(5).n(2), "addCompletions"},
      };
      for (Object[] b : bad) {
        KvtierException e = assertThrows(KvtierException.class, () -> c.add((Request) b[0]));
        assertEquals(Status.INVALID_ARGUMENT, e.status());
        assertTrue(e.getMessage().contains((String) b[1]), e.getMessage());
      }
      KvtierException e = assertThrows(KvtierException.class, () -> c.addCompletions(new Request(5).n(200)));
      assertTrue(e.getMessage().contains("n must be"), e.getMessage());
    }
  }

  @Test
  void completionsEqualTheirSoloRuns() {
    try (Model m = Model.load(MODEL); Context c = Context.create(m, KvtierTest.cpu())) {
      List<Sequence> seqs = c.addCompletions(controls(70).n(3));
      assertEquals(3, seqs.size());
      c.runUntilIdle();
      for (int i = 0; i < 3; ++i) {
        Sequence s = seqs.get(i);
        assertEquals(seqs.get(0).id() + i, s.id());
        int[] got = s.tokens();
        Generation solo = c.generate(controls(70 + i));
        assertArrayEquals(solo.tokens(), got, "completion " + i);
        s.close();
      }
      assertEquals(2, c.stat("parallel_sampling.forks"));
    }
  }
}
