// A program run with nothing but the self-contained kvtier jar on its classpath (no libkvtier
// on the system, no java.library.path): it generates a few tokens, then checks from
// /proc/self/maps that libkvtier and the JNI library were loaded from the copies the jar
// carries (extracted into a kvtier-native-* directory), not from anywhere else.
// Usage: java -cp kvtier-VERSION-linux-x86_64.jar:. SelfContained MODEL_DIR
import dev.kvtier.Context;
import dev.kvtier.ContextOptions;
import dev.kvtier.Generation;
import dev.kvtier.Kvtier;
import dev.kvtier.Model;
import dev.kvtier.Request;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;

public final class SelfContained {
  public static void main(String[] args) throws Exception {
    try (Model model = Model.load(args[0]);
         Context ctx = Context.create(model, new ContextOptions().backend("cpu"))) {
      Generation g = ctx.generate(new Request(1, 2, 3).maxNewTokens(4).ignoreEos(true));
      System.out.println("kvtier " + Kvtier.version() + " generated " + Arrays.toString(g.tokens()));
      if (g.tokens().length != 4) throw new AssertionError("expected 4 tokens");
    }
    if (Kvtier.liveHandles() != 0) throw new AssertionError("native handles leaked");
    List<String> mapped = Files.readAllLines(Paths.get("/proc/self/maps")).stream()
        .filter(l -> l.contains("libkvtier"))
        .map(l -> l.substring(l.indexOf('/')))
        .distinct()
        .collect(Collectors.toList());
    System.out.println("mapped: " + mapped);
    for (String lib : new String[] {"libkvtier.so", "libkvtier_jni.so"}) {
      if (mapped.stream().noneMatch(p -> p.contains(lib))) {
        throw new AssertionError(lib + " is not mapped");
      }
    }
    for (String path : mapped) {
      if (!path.contains("/kvtier-native-")) {
        throw new AssertionError(path + " was not loaded from the jar's copy");
      }
    }
  }
}
