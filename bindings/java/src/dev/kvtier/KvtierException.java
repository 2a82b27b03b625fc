// The error of every failing kvtier call: the C status plus the message the library left.
package dev.kvtier;

public class KvtierException extends RuntimeException {
  private final Status status;
  private final String detail;

  KvtierException(int code, String detail) {
    super(Kvtier.statusString(code) + ": " + detail);
    this.status = Status.fromCode(code);
    this.detail = detail;
  }

  /** The C API status. */
  public Status status() { return status; }

  /** The library's message alone, without the status name. */
  public String detail() { return detail; }
}
