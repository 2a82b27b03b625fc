// Why a sequence stopped (kvt_finish_reason).
package dev.kvtier;

public enum FinishReason {
  NONE, STOP, LENGTH, CANCELLED, ERROR;

  static FinishReason fromCode(int code) {
    FinishReason[] all = values();
    return code >= 0 && code < all.length ? all[code] : ERROR;
  }
}
