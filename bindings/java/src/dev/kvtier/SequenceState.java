// Where a sequence is in its life (kvt_sequence_state).
package dev.kvtier;

/** Where a sequence is in its life, with the order of {@code kvt_sequence_state}. */
public enum SequenceState {
  /** Admitted, not yet scheduled. */
  WAITING,
  /** Prefilling or decoding. */
  RUNNING,
  /** Preempted: its KV swapped out or dropped for recompute. */
  PAUSED,
  /** Finished: see its {@link FinishReason}. */
  FINISHED;

  static SequenceState fromCode(int code) {
    SequenceState[] all = values();
    return code >= 0 && code < all.length ? all[code] : FINISHED;
  }
}
