// A small service built on the kvtier C# binding: one thread drives the engine, request
// threads each add a sequence and stream its tokens as they are produced, then the context
// statistics are printed. Usage: mono ServiceExample.exe MODEL_DIR
using System;
using System.Collections.Generic;
using System.Text;
using System.Threading;
using Kvtier;

public static class ServiceExample
{
    public static int Main(string[] args)
    {
        if (args.Length != 1)
        {
            Console.Error.WriteLine("usage: ServiceExample MODEL_DIR");
            return 2;
        }
        Console.WriteLine("kvtier " + Library.Version);
        using (Model model = Model.Load(args[0]))
        using (Context ctx = Context.Create(model, new ContextOptions().Backend("cpu").Set("gpu_kv_bytes", "4MiB")))
        {
            int stopping = 0;
            var engine = new Thread(() =>
            {
                while (Volatile.Read(ref stopping) == 0 || ctx.NumUnfinished > 0)
                    if (ctx.Step().Count == 0) Thread.Yield();
            });
            engine.Start();

            var clients = new List<Thread>();
            for (int i = 0; i < 4; ++i)
            {
                int client = i;
                var t = new Thread(() =>
                {
                    var req = new Request(1 + client, 20 + client, 30, 40).MaxNewTokens(10)
                        .Temperature(0.7f).Seed(client).IgnoreEos(true);
                    using (Sequence seq = ctx.Add(req))
                    {
                        var line = new StringBuilder();
                        foreach (Event e in seq)
                        {
                            if (e.HasToken)
                            {
                                line.Append(' ').Append(e.Token);
                                Console.WriteLine("request {0} token {1}", client, e.Token);
                            }
                            if (e.IsFinal) Console.WriteLine("request {0} done ({1}):{2}", client, e.FinishReason, line);
                        }
                    }
                });
                clients.Add(t);
                t.Start();
            }
            foreach (var t in clients) t.Join();
            Volatile.Write(ref stopping, 1);
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
