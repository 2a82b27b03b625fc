// A program that never calls Dispose: 1,000 contexts (each with its KV pools, its events
// object and one generation) and their model are left to the GC. Once collected and
// finalized, every native handle must be released: Library.LiveHandles returns to 0.
// Usage: mono NoDispose.exe MODEL_DIR
using System;
using Kvtier;

public static class NoDispose
{
    const int Contexts = 1000;

    public static int Main(string[] args)
    {
        long peak = Abandon(args[0]);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        GC.WaitForPendingFinalizers();
        long left = Library.LiveHandles;
        Console.WriteLine("{0} contexts abandoned; live handles: at most {1} while running, {2} after GC",
                          Contexts, peak, left);
        if (left != 0)
        {
            Console.Error.WriteLine("FAIL: {0} native handles were not released by the finalizers", left);
            return 1;
        }
        return 0;
    }

    // Everything made here is unreachable once it returns (a separate method, so that no
    // local of Main keeps an object alive).
    static long Abandon(string modelDir)
    {
        Model model = Model.Load(modelDir);
        var options = new ContextOptions().Backend("cpu").Threads(1).GpuKvBytes(1 << 20);
        long peak = 0;
        for (int i = 0; i < Contexts; ++i)
        {
            Context context = Context.Create(model, options);
            Generation g = context.Generate(new Request(1, 2, 3 + i % 7).MaxNewTokens(2).IgnoreEos(true));
            if (g.Tokens.Length != 2) throw new Exception("generated " + g.Tokens.Length + " tokens");
            peak = Math.Max(peak, Library.LiveHandles);
        }
        return peak;
    }
}
