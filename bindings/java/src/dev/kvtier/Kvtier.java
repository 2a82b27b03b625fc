// Library-wide calls: version, status names, the live-handle counter. Thread-safe.
package dev.kvtier;

import dev.kvtier.swig.kvtier;
import java.nio.charset.StandardCharsets;

public final class Kvtier {
  private Kvtier() {}

  /** Run-time version of the loaded native library, e.g. "0.1.0". */
  public static String version() { return kvtier.kvt_version_string(); }

  public static int versionMajor() { return kvtier.kvt_version_major(); }

  public static int versionMinor() { return kvtier.kvt_version_minor(); }

  public static int versionPatch() { return kvtier.kvt_version_patch(); }

  /** "KVT_ERR_BUSY" for a status code. */
  public static String statusString(int code) { return kvtier.kvt_status_string(code); }

  /** Native handles alive in this process; 0 once everything is closed. */
  public static long liveHandles() { return kvtier.kvt_live_handles(); }

  /** The NUL-terminated UTF-8 string at the start of buf. */
  static String cString(byte[] buf) {
    int n = 0;
    while (n < buf.length && buf[n] != 0) ++n;
    return new String(buf, 0, n, StandardCharsets.UTF_8);
  }

  static void check(int status, String message) {
    if (status != 0) throw new KvtierException(status, message);
  }
}
