// NUnit tests of logging, progress and cancellation, Prometheus metrics, prefix pinning,
// sequence errors and generation_config.json defaults through the C# binding.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using NUnit.Framework;

namespace Kvtier.Tests
{
    [TestFixture]
    public class OpsTests
    {
        static readonly string ModelDir = Environment.GetEnvironmentVariable("KVTIER_TEST_MODEL");

        static ContextOptions Cpu() => new ContextOptions().Backend("cpu").Threads(2);

        [TearDown]
        public void NoLeaks()
        {
            Assert.AreEqual(0, Library.LiveHandles, "native handles leaked");
        }

        [Test]
        public void LogHandlerHearsTheLibrary()
        {
            var lines = new List<KeyValuePair<LogLevel, string>>();
            Logging.SetHandler((level, message) => { lock (lines) lines.Add(new KeyValuePair<LogLevel, string>(level, message)); },
                               LogLevel.Info);
            try
            {
                using (var m = Model.Load(ModelDir))
                {
                    Context.Create(m, Cpu().HostKvBytes(100)).Dispose();
                    Logging.SetHandler(null);
                    int heard;
                    lock (lines)
                    {
                        heard = lines.Count;
                        Assert.IsTrue(lines.Any(l => l.Key == LogLevel.Warn && l.Value.Contains("host tier disabled")
                                                     && l.Value.Contains("host_kv_bytes 100")),
                                      string.Join("\n", lines.Select(l => l.Value)));
                    }
                    Context.Create(m, Cpu().HostKvBytes(100)).Dispose();
                    lock (lines) Assert.AreEqual(heard, lines.Count, "called after SetHandler(null)");
                }
            }
            finally
            {
                Logging.SetHandler(null);
            }
        }

        // Each stage runs from 0 to its total, in the order given.
        static void CheckStages(List<Tuple<string, long, long>> reports, params string[] want)
        {
            var got = new List<string>();
            for (int i = 0; i < reports.Count; ++i)
            {
                var r = reports[i];
                if (i == 0 || reports[i - 1].Item1 != r.Item1)
                {
                    got.Add(r.Item1);
                    Assert.AreEqual(0, r.Item2, r.Item1);
                }
                if (i == reports.Count - 1 || reports[i + 1].Item1 != r.Item1) Assert.AreEqual(r.Item3, r.Item2, r.Item1);
            }
            CollectionAssert.AreEqual(want, got);
        }

        [Test]
        public void ProgressAndCancellation()
        {
            var reports = new List<Tuple<string, long, long>>();
            ProgressCallback record = (stage, done, total) => { reports.Add(Tuple.Create(stage, done, total)); return true; };
            using (var m = Model.Load(ModelDir, record))
            {
                CheckStages(reports, "files", "tensors", "tokenizer");
                var e = Assert.Throws<KvtierException>(() => Model.Load(ModelDir, (stage, done, total) => stage != "tensors"));
                Assert.AreEqual(Status.Cancelled, e.Status);
                StringAssert.Contains("tensors", e.Message);

                reports.Clear();
                Context.Create(m, Cpu().Progress(record)).Dispose();
                CheckStages(reports, "weights", "kv_pools", "warmup");
                e = Assert.Throws<KvtierException>(() => Context.Create(m, Cpu().Progress((stage, done, total) => done == 0)));
                Assert.AreEqual(Status.Cancelled, e.Status);
                var thrown = Assert.Throws<InvalidOperationException>(
                    () => Context.Create(m, Cpu().Progress((stage, done, total) => { throw new InvalidOperationException("stop at " + stage); })));
                Assert.AreEqual("stop at weights", thrown.Message);
            }
        }

        [Test]
        public void MetricsText()
        {
            using (var m = Model.Load(ModelDir))
            using (var c = Context.Create(m, Cpu()))
            {
                for (int i = 0; i < 2; ++i) c.Generate(new Request(5, 6, 7).MaxNewTokens(4).IgnoreEos(true));
                string text = c.MetricsText();
                StringAssert.Contains("# TYPE kvtier_generated_tokens_total counter\nkvtier_generated_tokens_total 8\n", text);
                StringAssert.Contains("kvtier_time_to_first_token_seconds_count 2\n", text);
                StringAssert.Contains("kvtier_inter_token_latency_seconds_count 6\n", text);
            }
        }

        // The text grows between the calls, by more than the slack of a buffer sized by the call
        // before: copied once more each time, it comes back whole, never cut short.
        [Test]
        public void CopyGrowingTextCopiesAgainWhileTheTextGrows()
        {
            string text = null;
            int calls = 0;
            string got = Context.CopyGrowingText(buf =>
            {
                ++calls;
                text = new string((char)('a' + calls), 1000 * calls);
                byte[] bytes = System.Text.Encoding.UTF8.GetBytes(text);
                int n = Math.Min(bytes.Length, buf.Length - 1); // as the C API copies
                Array.Copy(bytes, buf, n);
                buf[n] = 0;
                return bytes.Length;
            });
            Assert.AreEqual(text, got, "after " + calls + " calls");
        }

        [Test]
        public void PinPrefixAndSequenceError()
        {
            using (var m = Model.Load(ModelDir))
            using (var c = Context.Create(m, Cpu().BlockTokens(4)))
            {
                using (var s = c.Add(new Request(3, 4, 5, 6, 7, 8, 9, 10, 11).MaxNewTokens(2).IgnoreEos(true).PinPrefix(true)))
                {
                    c.RunUntilIdle();
                    Assert.AreEqual("", s.ErrorMessage());
                }
                Assert.AreEqual(2, c.Stat("pinned_blocks"));
                c.UnpinPrefixes();
                Assert.AreEqual(0, c.Stat("pinned_blocks"));
                Assert.AreEqual(Status.NotFound, Assert.Throws<KvtierException>(() => c.SequenceError(424242)).Status);
            }
        }

        static string WithGenerationConfig(string json)
        {
            string dir = Path.Combine(Path.GetTempPath(), "kvtier-cs-" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(dir);
            foreach (string f in new[] { "config.json", "model.safetensors" }) File.Copy(Path.Combine(ModelDir, f), Path.Combine(dir, f));
            File.WriteAllText(Path.Combine(dir, "generation_config.json"), json);
            return dir;
        }

        static int[] GenerateOn(string dir, Request request)
        {
            using (var m = Model.Load(dir))
            using (var c = Context.Create(m, Cpu()))
                return c.Generate(request).Tokens;
        }

        [Test]
        public void GenerationConfigDefaults()
        {
            string dir = WithGenerationConfig("{\"do_sample\": true, \"temperature\": 1.3, \"top_k\": 20, \"max_new_tokens\": 7}");
            string bad = WithGenerationConfig("{\"top_k\": \"many\"}");
            try
            {
                using (var m = Model.Load(dir)) StringAssert.Contains("\"max_new_tokens\":7", m.InfoJson());
                int[] sampled = GenerateOn(dir, new Request(9, 8, 7, 6).Seed(99).IgnoreEos(true));
                int[] explicitly = GenerateOn(ModelDir, new Request(9, 8, 7, 6).Seed(99).IgnoreEos(true).Temperature(1.3f).TopK(20).MaxNewTokens(7));
                Assert.AreEqual(7, sampled.Length);
                CollectionAssert.AreEqual(explicitly, sampled);
                int[] greedy = GenerateOn(dir, new Request(9, 8, 7, 6).Temperature(0).MaxNewTokens(7).IgnoreEos(true));
                CollectionAssert.AreEqual(GenerateOn(ModelDir, new Request(9, 8, 7, 6).MaxNewTokens(7).IgnoreEos(true)), greedy);
                var e = Assert.Throws<KvtierException>(() => Model.Load(bad));
                Assert.AreEqual(Status.InvalidArgument, e.Status);
                StringAssert.Contains("top_k", e.Message);
            }
            finally
            {
                Directory.Delete(dir, true);
                Directory.Delete(bad, true);
            }
        }
    }
}
