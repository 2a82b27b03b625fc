// Status codes of the C API (kvt_status), as a Java enum.
package dev.kvtier;

public enum Status {
  OK, INVALID_ARGUMENT, NOT_FOUND, UNSUPPORTED, CAPACITY, BUSY, IO, CORRUPT, OUT_OF_MEMORY,
  STATE, BACKEND, INTERNAL;

  /** The status for a C code; unknown codes map to INTERNAL. */
  public static Status fromCode(int code) {
    Status[] all = values();
    return code >= 0 && code < all.length ? all[code] : INTERNAL;
  }

  public int code() { return ordinal(); }
}
