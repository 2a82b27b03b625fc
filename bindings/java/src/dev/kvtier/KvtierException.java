// The error of every failing kvtier call: the C status plus the message the library left.
package dev.kvtier;

/** The error of every failing kvtier call: the C API status and the library's message. */
public class KvtierException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  /** The C API status. */
  private final Status status;
  /** The library's message. */
  private final String detail;

  KvtierException(int code, String detail) {
    super(Kvtier.statusString(code) + ": " + detail);
    this.status = Status.fromCode(code);
    this.detail = detail;
  }

  /**
   * The C API status.
   *
   * @return the status
   */
  public Status status() { return status; }

  /**
   * The library's message alone, without the status name.
   *
   * @return the message
   */
  public String detail() { return detail; }
}
