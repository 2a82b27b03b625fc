// A small service built on the kvtier Java binding: one thread drives the engine, request
// threads each add a sequence and stream its text (token ids for a model without a
// tokenizer) as it is produced, then the context statistics are printed.
// Usage: java -cp kvtier.jar:. ServiceExample [MODEL_DIR]
// Without MODEL_DIR it uses the demo model of package kvtier-demo-model
// (/usr/share/kvtier/models/demo, or $KVTIER_DEMO_MODEL).
import dev.kvtier.Context;
import dev.kvtier.ContextOptions;
import dev.kvtier.Event;
import dev.kvtier.Kvtier;
import dev.kvtier.Model;
import dev.kvtier.Request;
import dev.kvtier.Sequence;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

public final class ServiceExample {
  public static void main(String[] args) throws Exception {
    if (args.length > 1) {
      System.err.println("usage: ServiceExample [MODEL_DIR]");
      System.exit(2);
    }
    String env = System.getenv("KVTIER_DEMO_MODEL");
    String modelDir = args.length == 1 ? args[0]
        : env != null && !env.isEmpty() ? env : "/usr/share/kvtier/models/demo";
    String[] prompts = {"The meaning of life is", "A computer is", "Never trust a man who", "Love is"};
    System.out.println("kvtier " + Kvtier.version());
    try (Model model = Model.load(modelDir);
         Context ctx = Context.create(model,
             new ContextOptions().backend("cpu").set("gpu_kv_bytes", "4MiB"))) {
      AtomicBoolean stopping = new AtomicBoolean();
      Thread engine = new Thread(() -> {
        while (!stopping.get() || ctx.numUnfinished() > 0) {
          if (ctx.step().isEmpty()) Thread.onSpinWait();
        }
      }, "engine");
      engine.start();

      boolean text = model.hasTokenizer();
      List<Thread> clients = new ArrayList<>();
      for (int i = 0; i < 4; ++i) {
        final int client = i;
        Thread t = new Thread(() -> {
          // A random-weight model: token ids, and no end of text to wait for.
          Request req = text
              ? new Request().promptText(prompts[client]).maxNewTokens(24).temperature(0.7f).seed(client)
              : new Request(1 + client, 20 + client, 30, 40).maxNewTokens(10)
                    .temperature(0.7f).seed(client).ignoreEos(true);
          try (Sequence seq = ctx.add(req)) {
            StringBuilder line = new StringBuilder(text ? prompts[client] : "");
            for (Event e : seq) {
              if (e.hasToken() && !text) {
                line.append(' ').append(e.token());
                System.out.println("request " + client + " token " + e.token());
              }
              if (text && e.text() != null) line.append(e.text());
              if (e.isFinal()) {
                System.out.println("request " + client + " done (" + e.finishReason() + "): " + line);
              }
            }
          }
        }, "client-" + i);
        clients.add(t);
        t.start();
      }
      for (Thread t : clients) t.join();
      stopping.set(true);
      engine.join();
      System.out.println("stats " + ctx.statsJson());
      System.out.println("generated_tokens " + ctx.stat("generated_tokens"));
    }
    if (Kvtier.liveHandles() != 0) throw new IllegalStateException("native handles leaked");
  }
}
