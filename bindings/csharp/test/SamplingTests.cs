// NUnit tests of the sampler chain, log-probabilities and parallel sampling in the C#
// binding: the CLI's tokens for the same request, log-probabilities on events and from the
// context alike, completions equal to their solo runs, inputs refused naming the field.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Text.RegularExpressions;
using NUnit.Framework;

namespace Kvtier.Tests
{
    [TestFixture]
    public class SamplingTests
    {
        static readonly string ModelDir = Environment.GetEnvironmentVariable("KVTIER_TEST_MODEL");

        static ContextOptions Cpu() => new ContextOptions().Backend("cpu").Threads(2);

        [TearDown]
        public void NoLeaks()
        {
            Assert.AreEqual(0, Library.LiveHandles, "native handles leaked");
        }

        static Request Controls(long seed) =>
            new Request(5, 6, 7, 8, 9, 5, 6).MaxNewTokens(6).IgnoreEos(true).Temperature(0.9f).Seed(seed)
                .MinP(0.01f).RepetitionPenalty(1.2f).PresencePenalty(0.5f).FrequencyPenalty(0.5f)
                .LogitBias(new Dictionary<int, float> { { 11, 1.5f } }).Logprobs(3);

        static int[] CliTokens()
        {
            var psi = new ProcessStartInfo(Environment.GetEnvironmentVariable("KVTIER_CLI"),
                "run --model " + ModelDir + " --prompt-ids 5,6,7,8,9,5,6 --max-tokens 6 --ignore-eos --backend cpu" +
                " --temperature 0.9 --seed 40 --min-p 0.01 --repetition-penalty 1.2 --presence-penalty 0.5" +
                " --frequency-penalty 0.5 --logit-bias 11:1.5 --json")
            { UseShellExecute = false, RedirectStandardOutput = true };
            using (Process p = Process.Start(psi))
            {
                string output = p.StandardOutput.ReadToEnd();
                p.WaitForExit();
                Assert.AreEqual(0, p.ExitCode, output);
                Match m = Regex.Match(output, "\"tokens\":\\s*\\[([^\\]]*)\\]");
                Assert.IsTrue(m.Success, output);
                return m.Groups[1].Value.Split(',').Select(s => s.Trim()).Where(s => s.Length > 0)
                    .Select(int.Parse).ToArray();
            }
        }

        [Test]
        public void ControlsAndLogprobs()
        {
            int[] expected = CliTokens();
            using (Model m = Model.Load(ModelDir))
            using (Context c = Context.Create(m, Cpu()))
            {
                using (Sequence s = c.Add(Controls(40).PromptLogprobs(2)))
                {
                    c.RunUntilIdle();
                    var tokens = new List<int>();
                    var fromEvents = new List<TokenLogprobs>();
                    foreach (Event e in s)
                    {
                        if (!e.HasToken) continue;
                        tokens.Add(e.Token);
                        fromEvents.Add(e.Logprobs);
                    }
                    CollectionAssert.AreEqual(expected, tokens);
                    List<TokenLogprobs> stored = c.Logprobs(s.Id);
                    CollectionAssert.AreEqual(fromEvents, stored);
                    foreach (TokenLogprobs lp in stored)
                    {
                        Assert.AreEqual(3, lp.Top.Count);
                        Assert.IsTrue(lp.Logprob <= 0f && lp.Top[0].Logprob >= lp.Top[2].Logprob);
                    }
                    List<TokenLogprobs> prompt = c.PromptLogprobs(s.Id);
                    Assert.AreEqual(6, prompt.Count);
                    Assert.AreEqual(2, prompt[0].Top.Count);
                    Assert.AreEqual(Event.NoToken, prompt[0].Token);
                }
                using (Sequence plain = c.Add(new Request(5, 6).MaxNewTokens(1)))
                {
                    List<Event> events = c.Step();
                    Assert.IsNull(events[0].Logprobs);
                    var e = Assert.Throws<KvtierException>(() => c.Logprobs(plain.Id));
                    Assert.AreEqual(Status.State, e.Status);
                }
                var bad = new List<KeyValuePair<Request, string>>
                {
                    new KeyValuePair<Request, string>(new Request(5).RepetitionPenalty(-1f), "repetition_penalty"),
                    new KeyValuePair<Request, string>(new Request(5).PresencePenalty(3f), "presence_penalty"),
                    new KeyValuePair<Request, string>(new Request(5).FrequencyPenalty(float.NaN), "frequency_penalty"),
                    new KeyValuePair<Request, string>(new Request(5).MinP(2f), "min_p"),
                    new KeyValuePair<Request, string>(new Request(5).LogitBias(new Dictionary<int, float> { { -1, 1f } }), "negative"),
                    new KeyValuePair<Request, string>(new Request(5).LogitBias(new Dictionary<int, float> { { 1 << 30, 1f } }), "vocabulary"),
                    new KeyValuePair<Request, string>(new Request(5).Logprobs(21), "logprobs"),
                    new KeyValuePair<Request, string>(new Request(5).PromptLogprobs(-2), "prompt_logprobs"),
                    new KeyValuePair<Request, string>(new Request(5).N(2), "AddCompletions"),
                };
                foreach (var b in bad)
                {
                    var e = Assert.Throws<KvtierException>(() => c.Add(b.Key));
                    Assert.AreEqual(Status.InvalidArgument, e.Status);
                    StringAssert.Contains(b.Value, e.Message);
                }
                var tooMany = Assert.Throws<KvtierException>(() => c.AddCompletions(new Request(5).N(200)));
                StringAssert.Contains("n must be", tooMany.Message);
            }
        }

        [Test]
        public void CompletionsEqualTheirSoloRuns()
        {
            using (Model m = Model.Load(ModelDir))
            using (Context c = Context.Create(m, Cpu()))
            {
                IReadOnlyList<Sequence> seqs = c.AddCompletions(Controls(70).N(3));
                Assert.AreEqual(3, seqs.Count);
                c.RunUntilIdle();
                for (int i = 0; i < 3; ++i)
                {
                    Sequence s = seqs[i];
                    Assert.AreEqual(seqs[0].Id + i, s.Id);
                    int[] got = s.Tokens();
                    Generation solo = c.Generate(Controls(70 + i));
                    CollectionAssert.AreEqual(solo.Tokens, got, "completion " + i);
                    s.Dispose();
                }
                Assert.AreEqual(2, c.Stat("parallel_sampling.forks"));
            }
        }
    }
}
