// Where a sequence is in its life (kvt_sequence_state).
package dev.kvtier;

public enum SequenceState {
  WAITING, RUNNING, PAUSED, FINISHED;

  static SequenceState fromCode(int code) {
    SequenceState[] all = values();
    return code >= 0 && code < all.length ? all[code] : FINISHED;
  }
}
