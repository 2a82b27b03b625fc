// Loads the JNI library once, from the first of: the file named by -Dkvtier.jni.library,
// kvtier_jni on java.library.path (the system's, e.g. the Debian package libkvtier-java), or
// the copies this jar carries for the running platform (the self-contained jar). Runs in the
// static initializer of kvtierJNI, which the JVM runs once: no locking needed.
package dev.kvtier.swig;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;

final class NativeLoader {
  private NativeLoader() {}

  static void load() {
    String path = System.getProperty("kvtier.jni.library");
    if (path != null && !path.isEmpty()) {
      System.load(path);
      return;
    }
    try {
      System.loadLibrary("kvtier_jni");
    } catch (UnsatisfiedLinkError system) {
      String dir = "/dev/kvtier/native/" + platform() + "/";
      if (NativeLoader.class.getResource(dir + "libraries") == null) {
        throw system;  // not the self-contained jar, or not built for this platform
      }
      try {
        loadBundled(dir);
      } catch (IOException | UnsatisfiedLinkError bundled) {
        UnsatisfiedLinkError e = new UnsatisfiedLinkError(
            "kvtier: no usable kvtier_jni on java.library.path (" + system.getMessage()
            + "), and loading the copies in this jar failed: " + bundled);
        e.initCause(bundled);
        throw e;
      }
    }
  }

  // The self-contained jar's /dev/kvtier/native/<os>-<arch>/ holds the libraries and a file
  // "libraries" naming them in load order: libkvtier first, so that the JNI library's
  // dependency on its soname resolves to the copy already loaded, not to a search of the
  // system paths. They are extracted into a new private directory (under -Dkvtier.native.dir,
  // default java.io.tmpdir), loaded, and deleted: the mappings stay, and nothing is left
  // behind however the JVM ends.
  private static void loadBundled(String dir) throws IOException {
    List<String> names;
    try (InputStream in = NativeLoader.class.getResourceAsStream(dir + "libraries")) {
      names = new String(in.readAllBytes(), StandardCharsets.UTF_8).lines()
          .map(String::trim).filter(n -> !n.isEmpty()).collect(Collectors.toList());
    }
    String parent = System.getProperty("kvtier.native.dir", System.getProperty("java.io.tmpdir"));
    Path target = Files.createTempDirectory(Paths.get(parent), "kvtier-native-");
    try {
      for (String name : names) {
        try (InputStream in = NativeLoader.class.getResourceAsStream(dir + name)) {
          if (in == null) throw new IOException("missing resource " + dir + name);
          Files.copy(in, target.resolve(name), StandardCopyOption.REPLACE_EXISTING);
        }
      }
      for (String name : names) System.load(target.resolve(name).toAbsolutePath().toString());
    } finally {
      for (String name : names) Files.deleteIfExists(target.resolve(name));
      Files.deleteIfExists(target);
    }
  }

  // "linux-x86_64" on 64-bit x86 Linux: the operating system and the architecture by the
  // names the build uses (uname -s, lower case; uname -m).
  static String platform() {
    String os = System.getProperty("os.name").toLowerCase(Locale.ROOT).replaceAll("\\s", "");
    String arch = System.getProperty("os.arch").toLowerCase(Locale.ROOT);
    switch (arch) {
      case "amd64":
      case "x86-64":
        arch = "x86_64";
        break;
      case "arm64":
        arch = "aarch64";
        break;
      default:
        break;
    }
    return os + "-" + arch;
  }
}
