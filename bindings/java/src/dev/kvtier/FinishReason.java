// Why a sequence stopped (kvt_finish_reason).
package dev.kvtier;

/** Why a sequence stopped, with the order of {@code kvt_finish_reason}. */
public enum FinishReason {
  /** Still running. */
  NONE,
  /** A stop/eos token or a stop string was produced. */
  STOP,
  /** {@link Request#maxNewTokens} reached, or the context is full. */
  LENGTH,
  /** Cancelled: {@link Sequence#cancel}, {@link Sequence#close} or {@link Context#close}. */
  CANCELLED,
  /** The sequence failed alone. */
  ERROR,
  /**
   * The output is complete per the request's JSON schema or grammar
   * ({@link Request#jsonSchema}, {@link Request#grammar}); a constrained sequence that ends any
   * other way is incomplete.
   */
  GRAMMAR;

  static FinishReason fromCode(int code) {
    FinishReason[] all = values();
    return code >= 0 && code < all.length ? all[code] : ERROR;
  }
}
