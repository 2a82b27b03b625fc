// Library-wide calls: version, status names, the live-handle counter. Thread-safe.
package dev.kvtier;

import dev.kvtier.swig.kvtier;
import java.nio.charset.StandardCharsets;

/**
 * Library-wide calls: the version of the loaded native library, status names, the live-handle
 * counter.
 */
public final class Kvtier {
  private Kvtier() {}

  /**
   * The run-time version of the loaded native library.
   *
   * @return e.g. {@code "0.1.0"}
   */
  public static String version() { return kvtier.kvt_version_string(); }

  /**
   * The major version of the loaded native library.
   *
   * @return the major version
   */
  public static int versionMajor() { return kvtier.kvt_version_major(); }

  /**
   * The minor version of the loaded native library.
   *
   * @return the minor version
   */
  public static int versionMinor() { return kvtier.kvt_version_minor(); }

  /**
   * The patch version of the loaded native library.
   *
   * @return the patch version
   */
  public static int versionPatch() { return kvtier.kvt_version_patch(); }

  /**
   * The C name of a status code.
   *
   * @param code a {@code kvt_status} value
   * @return e.g. {@code "KVT_ERR_BUSY"}
   */
  public static String statusString(int code) { return kvtier.kvt_status_string(code); }

  /**
   * The native handles alive in this process.
   *
   * @return 0 once every Model and Context is closed
   */
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
