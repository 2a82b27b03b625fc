// NUnit tests of the C# binding, mirroring tests/c_api/c_api_test.c. The model directory
// comes from KVTIER_TEST_MODEL, the CLI used as the reference from KVTIER_CLI.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Text.RegularExpressions;
using System.Threading;
using NUnit.Framework;

namespace Kvtier.Tests
{
    [TestFixture]
    public class KvtierTests
    {
        static readonly string ModelDir = Environment.GetEnvironmentVariable("KVTIER_TEST_MODEL");

        static ContextOptions Cpu() => new ContextOptions().Backend("cpu").Threads(2);

        [TearDown]
        public void NoLeaks()
        {
            Assert.AreEqual(0, Library.LiveHandles, "native handles leaked");
        }

        [Test]
        public void Version()
        {
            Assert.AreEqual(0, Library.VersionMajor);
            StringAssert.StartsWith(Library.VersionMajor + ".", Library.Version);
            Assert.AreEqual("KVT_ERR_BUSY", Library.StatusString(Status.Busy));
        }

        [Test]
        public void BadInputThrowsWithMessage()
        {
            var e = Assert.Throws<KvtierException>(() => Model.Load("/nonexistent/kvtier"));
            Assert.AreEqual(Status.NotFound, e.Status);
            Assert.IsNotEmpty(e.Detail);
            using (Model m = Model.Load(ModelDir))
            {
                e = Assert.Throws<KvtierException>(() => Context.Create(m, Cpu().BlockTokens(0)).Dispose());
                Assert.AreEqual(Status.InvalidArgument, e.Status);
                StringAssert.Contains("block_tokens", e.Message);
                e = Assert.Throws<KvtierException>(() => Context.Create(m, Cpu().Set("no_such_option", 1)).Dispose());
                StringAssert.Contains("no_such_option", e.Message);
                using (Context c = Context.Create(m, Cpu()))
                {
                    e = Assert.Throws<KvtierException>(() => c.Add(new Request()));
                    Assert.AreEqual(Status.InvalidArgument, e.Status);
                    StringAssert.Contains("empty", e.Message);
                    e = Assert.Throws<KvtierException>(() => c.Add(new Request(1, 1 << 30)));
                    StringAssert.Contains("vocabulary", e.Message);
                    e = Assert.Throws<KvtierException>(() => c.Add(new Request(1, 2).MaxNewTokens(0)));
                    StringAssert.Contains("max_new_tokens", e.Message);
                    e = Assert.Throws<KvtierException>(() => c.Cancel(424242));
                    Assert.AreEqual(Status.NotFound, e.Status);
                    e = Assert.Throws<KvtierException>(() => c.Stat("no.such.stat"));
                    Assert.AreEqual(Status.NotFound, e.Status);
                    Assert.AreEqual(0, c.NumUnfinished);
                }
            }
        }

        [Test]
        public void CacheNamespacesShareNoPrefix()
        {
            int[] prompt = Enumerable.Range(0, 40).Select(i => 3 + (i * 7) % 200).ToArray();  // two full blocks
            using (Model m = Model.Load(ModelDir))
            using (Context c = Context.Create(m, Cpu()))
            {
                int[] a = c.Generate(new Request(prompt).MaxNewTokens(4).IgnoreEos(true).CacheNamespace("tenant-a")).Tokens;
                Assert.AreEqual(0, c.Stat("prefix_hits.gpu"));
                int[] b = c.Generate(new Request(prompt).MaxNewTokens(4).IgnoreEos(true).CacheNamespace("tenant-b")).Tokens;
                Assert.AreEqual(0, c.Stat("prefix_hits.gpu"));  // tenant-a's blocks are not tenant-b's
                int[] again = c.Generate(new Request(prompt).MaxNewTokens(4).IgnoreEos(true).CacheNamespace("tenant-a")).Tokens;
                Assert.AreEqual(2, c.Stat("prefix_hits.gpu"));
                CollectionAssert.AreEqual(a, b);  // a namespace never changes the tokens
                CollectionAssert.AreEqual(a, again);
                // Any Unicode text is a namespace (sent as exact UTF-8); NUL and overlong ones are refused.
                c.Generate(new Request(prompt).MaxNewTokens(1).CacheNamespace("t\u00e9nant-\U0001F600"));
                var e = Assert.Throws<KvtierException>(() => c.Add(new Request(prompt).CacheNamespace("a\0b")));
                Assert.AreEqual(Status.InvalidArgument, e.Status);
                StringAssert.Contains("NUL", e.Message);
                e = Assert.Throws<KvtierException>(() => c.Add(new Request(prompt).CacheNamespace(new string('x', 257))));
                Assert.AreEqual(Status.InvalidArgument, e.Status);
                StringAssert.Contains("256", e.Message);
                Assert.AreEqual(0, c.NumUnfinished);
            }
        }

        /// <summary>Tokens the C API produces for the same request, via the kvtier CLI.</summary>
        static int[] CliTokens(string promptIds, int maxTokens, float temperature, long seed)
        {
            var psi = new ProcessStartInfo(Environment.GetEnvironmentVariable("KVTIER_CLI"),
                string.Format(System.Globalization.CultureInfo.InvariantCulture,
                    "run --model {0} --prompt-ids {1} --max-tokens {2} --ignore-eos --backend cpu --temperature {3} --seed {4} --json",
                    ModelDir, promptIds, maxTokens, temperature, seed))
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
        public void GenerationEqualsTheCApi()
        {
            int[] greedy = CliTokens("5,6,7,8,9", 8, 0f, 0);
            int[] sampled = CliTokens("10,11,12,13,14", 8, 0.8f, 42);
            using (Model m = Model.Load(ModelDir))
            using (Context c = Context.Create(m, Cpu()))
            {
                Assert.Greater(m.VocabSize, 0);
                StringAssert.Contains("LlamaForCausalLM", m.InfoJson());
                m.Dispose(); // the context keeps its own reference
                Generation g = c.Generate(new Request(5, 6, 7, 8, 9).MaxNewTokens(8).IgnoreEos(true));
                CollectionAssert.AreEqual(greedy, g.Tokens);
                Assert.AreEqual(FinishReason.Length, g.FinishReason);

                var req = new Request(10, 11, 12, 13, 14).MaxNewTokens(8).IgnoreEos(true).Temperature(0.8f).Seed(42);
                using (Sequence s = c.Add(req))
                using (Sequence other = c.Add(new Request(20, 21, 22).MaxNewTokens(8)))
                {
                    Assert.AreEqual(SequenceState.Waiting, c.State(s.Id));
                    other.Cancel();
                    c.RunUntilIdle();
                    int[] streamed = s.Where(e => e.HasToken).Select(e => e.Token).ToArray();
                    CollectionAssert.AreEqual(sampled, streamed);
                    CollectionAssert.AreEqual(sampled, s.Tokens());
                    Assert.AreEqual(FinishReason.Length, s.FinishReason);
                    Assert.AreEqual(FinishReason.Cancelled, other.Last().FinishReason);
                    var err = Assert.Throws<KvtierException>(() => other.Cancel());
                    Assert.AreEqual(Status.State, err.Status);
                }
                StringAssert.Contains("\"tiers\"", c.StatsJson());
                Assert.AreEqual(0, c.Stat("tiers.gpu.used_bytes"));
                Assert.GreaterOrEqual(c.Stat("generated_tokens"), 16);
            }
        }

        [Test]
        public void TextApi()
        {
            using (Model plain = Model.Load(ModelDir))
            {
                Assert.IsFalse(plain.HasTokenizer);
                var err = Assert.Throws<KvtierException>(() => plain.Tokenize("hi", false));
                Assert.AreEqual(Status.Unsupported, err.Status);
            }
            using (Model m = Model.Load(Environment.GetEnvironmentVariable("KVTIER_TEST_TEXT_MODEL")))
            {
                Assert.IsTrue(m.HasTokenizer);
                string text = "h\u00e9llo \u2713 \U0001F642"; // 1-, 2-, 3- and 4-byte UTF-8 characters
                int[] ids = m.Tokenize(text, false);
                Assert.AreEqual(System.Text.Encoding.UTF8.GetByteCount(text), ids.Length); // bytes, no merges
                Assert.AreEqual(text, m.Detokenize(ids, false));
                Assert.Greater(m.Tokenize(text, true).Length, ids.Length); // BOS
                var err = Assert.Throws<KvtierException>(() => m.Detokenize(new[] { 1 << 30 }, false));
                Assert.AreEqual(Status.InvalidArgument, err.Status);
                // Each byte token's own bytes, the parts of characters included: together, the text.
                CollectionAssert.AreEqual(System.Text.Encoding.UTF8.GetBytes(text), ids.SelectMany(m.TokenBytes).ToArray());
                Assert.Greater(m.TokenBytes(m.Tokenize(text, true)[0]).Length, 0); // BOS: its text
                err = Assert.Throws<KvtierException>(() => m.TokenBytes(1 << 30));
                Assert.AreEqual(Status.InvalidArgument, err.Status);
                using (Context c = Context.Create(m, Cpu()))
                {
                    Generation byIds = c.Generate(new Request(m.Tokenize("Hello", true)).MaxNewTokens(6).IgnoreEos(true));
                    using (Sequence s = c.Add(new Request().PromptText("Hello").MaxNewTokens(6).IgnoreEos(true)))
                    {
                        c.RunUntilIdle();
                        string streamed = string.Concat(s.Select(e => e.Text));
                        CollectionAssert.AreEqual(byIds.Tokens, s.Tokens());
                        Assert.AreEqual(s.Text(), streamed);
                        CollectionAssert.AreEqual(m.Tokenize("Hello", true), s.PromptTokens());
                    }
                }
            }
        }

        /// <summary>A GGUF file loads as the checkpoint directory it holds: the same model writes the same text.</summary>
        [Test]
        public void GgufModel()
        {
            var texts = new List<string>();
            foreach (string path in new[] { Environment.GetEnvironmentVariable("KVTIER_TEST_TEXT_MODEL"),
                                            Environment.GetEnvironmentVariable("KVTIER_TEST_TEXT_GGUF") })
            {
                using (Model m = Model.Load(path))
                using (Context c = Context.Create(m, Cpu()))
                {
                    Assert.IsTrue(m.HasTokenizer, path);
                    Assert.AreEqual(258, m.VocabSize, path);
                    Generation g = c.Generate(new Request().PromptText("Tiers at work").MaxNewTokens(12).IgnoreEos(true));
                    Assert.AreEqual(12, g.Tokens.Length, path);
                    texts.Add(m.Detokenize(g.Tokens, false));
                }
            }
            Assert.AreEqual(texts[0], texts[1]);
        }

        [Test]
        public void StructuredOutput()
        {
            using (Model m = Model.Load(Environment.GetEnvironmentVariable("KVTIER_TEST_TEXT_MODEL")))
            using (Context c = Context.Create(m, Cpu()))
            {
                var err = Assert.Throws<KvtierException>(() =>
                    c.Add(new Request().PromptText("x").JsonSchema("{\"type\":\"string\",\"pattern\":\"a\"}")));
                Assert.AreEqual(Status.InvalidArgument, err.Status);
                StringAssert.Contains("'pattern' is not supported", err.Message);
                err = Assert.Throws<KvtierException>(() => c.Add(new Request().PromptText("x").Grammar("root ::= nothing\n")));
                StringAssert.Contains("GBNF line 1, column 10", err.Message);
                string[] answers = { "yes", "no", "\u00e9t\u00e9 \U0001F642" };
                for (long seed = 1; seed <= 3; ++seed)
                {
                    using (Sequence s = c.Add(new Request().PromptText("Answer:").Temperature(1).Seed(seed).MaxNewTokens(32)
                               .Grammar("root ::= \"yes\" | \"no\" | \"\u00e9t\u00e9 \U0001F642\"\n")))
                    {
                        c.RunUntilIdle();
                        foreach (Event e in s) { }
                        Assert.AreEqual(FinishReason.Grammar, s.FinishReason);
                        CollectionAssert.Contains(answers, s.Text());
                    }
                }
                string schema = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}}," +
                                "\"required\":[\"ok\"],\"additionalProperties\":false}";
                Generation g = c.Generate(new Request().PromptText("JSON:").Temperature(1).MaxNewTokens(64).JsonSchema(schema));
                Assert.AreEqual(FinishReason.Grammar, g.FinishReason);
                StringAssert.IsMatch("^\\{\\s*\"ok\"\\s*:\\s*(true|false)\\s*\\}$", m.Detokenize(g.Tokens, true));
            }
        }

        [Test]
        public void CancellationTokenStopsStreamingAndGeneration()
        {
            using (Model m = Model.Load(ModelDir))
            using (Context c = Context.Create(m, Cpu()))
            using (var stop = new CancellationTokenSource())
            {
                var driver = new Thread(() => c.Run(stop.Token));
                driver.Start();
                using (var cts = new CancellationTokenSource())
                using (Sequence s = c.Add(new Request(1, 2, 3).MaxNewTokens(1000).IgnoreEos(true)))
                {
                    int seen = 0;
                    Assert.Throws<OperationCanceledException>(() =>
                    {
                        foreach (Event e in s.Events(cts.Token))
                            if (e.HasToken && ++seen == 2) cts.Cancel();
                    });
                    Assert.AreEqual(2, seen);
                    // The token cancelled the sequence in the engine: the driver's next step ends it.
                    Event last = s.Last();
                    Assert.AreEqual(FinishReason.Cancelled, last.FinishReason);
                    Assert.Less(s.Tokens().Length, 1000);
                }
                stop.Cancel();
                driver.Join(); // Run returns once its token is cancelled
            }
            using (Model m = Model.Load(ModelDir))
            using (Context c = Context.Create(m, Cpu()))
            {
                var cancelled = new CancellationToken(true);
                Assert.Throws<OperationCanceledException>(
                    () => c.Generate(new Request(1, 2, 3).MaxNewTokens(1000).IgnoreEos(true), cancelled));
                Assert.AreEqual(0, c.NumUnfinished, "the cancelled generation was stepped to its end");
                Generation g = c.Generate(new Request(1, 2, 3).MaxNewTokens(3).IgnoreEos(true), CancellationToken.None);
                Assert.AreEqual(3, g.Tokens.Length);
            }
        }

        [Test]
        public void RunEndsWhenTheContextIsDisposed()
        {
            using (Model m = Model.Load(ModelDir))
            {
                Context c = Context.Create(m, Cpu());
                var driver = new Thread(() => c.Run(CancellationToken.None));
                driver.Start();
                using (Sequence s = c.Add(new Request(1, 2, 3).MaxNewTokens(3).IgnoreEos(true)))
                {
                    Assert.AreEqual(3, s.Count(e => e.HasToken)); // stepped by the driver
                }
                c.Dispose();
                Assert.IsTrue(driver.Join(TimeSpan.FromSeconds(30)), "Run did not return after Dispose");
            }
        }

        [Test]
        public void ManyThreadsAddAndCancelWhileOneSteps()
        {
            const int threads = 8, perThread = 12;
            using (Model m = Model.Load(ModelDir))
            using (Context c = Context.Create(m, Cpu().MaxWaiting(4096)))
            {
                int done = 0, finished = 0, cancelled = 0;
                var reasons = new ConcurrentDictionary<long, FinishReason>();
                var errors = new ConcurrentQueue<Exception>();
                var driver = new Thread(() =>
                {
                    while (Volatile.Read(ref done) == 0 || c.NumUnfinished > 0)
                        if (c.Step().Count == 0) Thread.Yield();
                });
                driver.Start();
                var workers = new List<Thread>();
                for (int t = 0; t < threads; ++t)
                {
                    int seed = t;
                    var w = new Thread(() =>
                    {
                        try
                        {
                            for (int i = 0; i < perThread; ++i)
                            {
                                using (Sequence s = c.Add(new Request(1 + seed, 2 + i, 3).MaxNewTokens(4 + i % 5).IgnoreEos(true)))
                                {
                                    if (i % 3 == 0)
                                    {
                                        try { s.Cancel(); }
                                        catch (KvtierException ex) when (ex.Status == Status.State) { } // finished first
                                    }
                                    if (i % 4 == 1) continue; // disposed while running: cancelled and released
                                    Event last = s.Last();
                                    reasons[s.Id] = last.FinishReason;
                                    if (last.FinishReason == FinishReason.Cancelled) Interlocked.Increment(ref cancelled);
                                    else if (last.FinishReason == FinishReason.Length) Interlocked.Increment(ref finished);
                                }
                            }
                        }
                        catch (Exception ex) { errors.Enqueue(ex); }
                    });
                    workers.Add(w);
                    w.Start();
                }
                foreach (var w in workers) w.Join();
                Volatile.Write(ref done, 1);
                driver.Join();
                Assert.IsEmpty(errors, string.Join("\n", errors));
                Assert.AreEqual(0, c.NumUnfinished);
                Assert.AreEqual(reasons.Count, finished + cancelled);
                Assert.Greater(finished, 0);
            }
        }
    }
}
