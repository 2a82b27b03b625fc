// The library's log messages, bridged to java.util.logging. Thread-safe.
package dev.kvtier;

import dev.kvtier.swig.kvtier;
import java.nio.charset.StandardCharsets;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Sends the native library's log messages — a backend fallback and why, a tier disabled by
 * its options, a corrupt disk block, a failed disk write — to the {@link java.util.logging}
 * logger named {@value #LOGGER_NAME}, where the application's handlers and levels apply as
 * to any other logger. Messages are off until {@link #setLevel} turns them on (the library
 * never writes to stderr by itself). Records are logged from whichever thread the library
 * logs on, including its own disk I/O threads, sometimes while a context's lock is held: a
 * handler must not call back into kvtier.
 *
 * <p>Levels: the library's DEBUG, INFO, WARN and ERROR become {@link Level#FINE},
 * {@link Level#INFO}, {@link Level#WARNING} and {@link Level#SEVERE}.
 */
public final class Logging {
  /** The name of the logger that receives the library's messages. */
  public static final String LOGGER_NAME = "dev.kvtier";

  private static final Logger LOGGER = Logger.getLogger(LOGGER_NAME);

  private Logging() {}

  /**
   * The logger that receives the library's messages.
   *
   * @return the {@value #LOGGER_NAME} logger
   */
  public static Logger logger() { return LOGGER; }

  /**
   * Makes the native library log its messages at {@code level} and above (process-wide);
   * {@code null} or {@link Level#OFF} turns them off. Once this returns, messages follow the
   * new setting only.
   *
   * @param level the lowest level to forward
   */
  public static synchronized void setLevel(Level level) {
    boolean on = level != null && level.intValue() != Level.OFF.intValue();
    int status = kvtier.kvt_java_set_log_callback(on ? 1 : 0, on ? nativeLevel(level) : 0);
    Kvtier.check(status, "kvt_set_log_callback");
  }

  /** The lowest native level (kvt_log_level) a java.util.logging level lets through. */
  static int nativeLevel(Level level) {
    int v = level.intValue();
    if (v <= Level.FINE.intValue()) return 0;
    if (v <= Level.INFO.intValue()) return 1;
    if (v <= Level.WARNING.intValue()) return 2;
    return 3;
  }

  /** The java.util.logging level of a native level. */
  static Level julLevel(int nativeLevel) {
    switch (nativeLevel) {
      case 0: return Level.FINE;
      case 1: return Level.INFO;
      case 2: return Level.WARNING;
      default: return Level.SEVERE;
    }
  }

  /** Called by the JNI glue, on any thread, for each message. */
  static void dispatch(int level, byte[] message) {
    LOGGER.log(julLevel(level), new String(message, StandardCharsets.UTF_8));
  }
}
