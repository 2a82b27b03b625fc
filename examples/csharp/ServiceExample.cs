// A small service built on the kvtier C# binding: one thread drives the engine
// (Context.Run until its CancellationToken is cancelled), request threads each add a sequence
// and stream its text (token ids for a model without a tokenizer) as it is produced, one
// request is cancelled by its deadline (a CancellationToken), then the context statistics are
// printed.
// Usage: mono ServiceExample.exe [MODEL_DIR]
// Without MODEL_DIR it uses the demo model of package kvtier-demo-model
// (/usr/share/kvtier/models/demo, or $KVTIER_DEMO_MODEL).
using System;
using System.Collections.Generic;
using System.Text;
using System.Threading;
using Kvtier;

public static class ServiceExample
{
    public static int Main(string[] args)
    {
        if (args.Length > 1)
        {
            Console.Error.WriteLine("usage: ServiceExample [MODEL_DIR]");
            return 2;
        }
        string env = Environment.GetEnvironmentVariable("KVTIER_DEMO_MODEL");
        string modelDir = args.Length == 1 ? args[0]
            : !string.IsNullOrEmpty(env) ? env : "/usr/share/kvtier/models/demo";
        string[] prompts = { "The meaning of life is", "A computer is", "Never trust a man who", "Love is" };
        Console.WriteLine("kvtier " + Library.Version);
        using (Model model = Model.Load(modelDir))
        using (Context ctx = Context.Create(model, new ContextOptions().Backend("cpu").Set("gpu_kv_bytes", "4MiB")))
        {
            var stop = new CancellationTokenSource();
            var engine = new Thread(() => ctx.Run(stop.Token));
            engine.Start();

            bool text = model.HasTokenizer;
            var clients = new List<Thread>();
            for (int i = 0; i < 4; ++i)
            {
                int client = i;
                var t = new Thread(() =>
                {
                    // A random-weight model: token ids, and no end of text to wait for.
                    var req = text
                        ? new Request().PromptText(prompts[client]).MaxNewTokens(24).Temperature(0.7f).Seed(client)
                        : new Request(1 + client, 20 + client, 30, 40).MaxNewTokens(10)
                              .Temperature(0.7f).Seed(client).IgnoreEos(true);
                    // An impatient client: its token cancels the sequence after 1 ms.
                    var deadline = client == 3 ? new CancellationTokenSource(TimeSpan.FromMilliseconds(1))
                                               : new CancellationTokenSource();
                    using (deadline)
                    using (Sequence seq = ctx.Add(req))
                    {
                        var line = new StringBuilder(text ? prompts[client] : "");
                        try
                        {
                            foreach (Event e in seq.Events(deadline.Token))
                            {
                                if (text && e.Text != null) line.Append(e.Text);
                                if (e.HasToken && !text)
                                {
                                    line.Append(' ').Append(e.Token);
                                    Console.WriteLine("request {0} token {1}", client, e.Token);
                                }
                                if (e.IsFinal) Console.WriteLine("request {0} done ({1}): {2}", client, e.FinishReason, line);
                            }
                        }
                        catch (OperationCanceledException)
                        {
                            Console.WriteLine("request {0} cancelled by its deadline:{1}", client, line);
                        }
                    }
                });
                clients.Add(t);
                t.Start();
            }
            foreach (var t in clients) t.Join();
            stop.Cancel();
            engine.Join();
            Console.WriteLine("stats " + ctx.StatsJson());
            Console.WriteLine("generated_tokens " + ctx.Stat("generated_tokens"));
        }
        if (Library.LiveHandles != 0)
        {
            Console.Error.WriteLine("native handles leaked");
            return 1;
        }
        return 0;
    }
}
