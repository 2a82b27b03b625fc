// Status codes of the C API (kvt_status), as a Java enum.
package dev.kvtier;

/** Status codes of the C API, with the order and values of {@code kvt_status}. */
public enum Status {
  /** Success (never in a {@link KvtierException}). */
  OK,
  /** A parameter is out of range or malformed. */
  INVALID_ARGUMENT,
  /** Unknown sequence id, missing file or tensor. */
  NOT_FOUND,
  /** Architecture, dtype, tokenizer or backend not supported. */
  UNSUPPORTED,
  /** The request can never fit in the configured memory. */
  CAPACITY,
  /** The waiting queue is full: retry later (back-pressure). */
  BUSY,
  /** A file could not be read or written. */
  IO,
  /** A file or stored block failed validation. */
  CORRUPT,
  /** An allocation at creation time failed. */
  OUT_OF_MEMORY,
  /** The call is not valid in the object's current state. */
  STATE,
  /** The compute backend failed (e.g. a CUDA error). */
  BACKEND,
  /** A bug in kvtier: please report it. */
  INTERNAL,
  /** A progress listener cancelled the call. */
  CANCELLED;

  /**
   * The status for a C code.
   *
   * @param code a {@code kvt_status} value
   * @return its status; unknown codes map to {@link #INTERNAL}
   */
  public static Status fromCode(int code) {
    Status[] all = values();
    return code >= 0 && code < all.length ? all[code] : INTERNAL;
  }

  /**
   * The C value.
   *
   * @return the {@code kvt_status} value
   */
  public int code() { return ordinal(); }
}
