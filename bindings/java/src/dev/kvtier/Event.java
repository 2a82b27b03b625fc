// One event of a step: a sequence produced a token and/or finished.
package dev.kvtier;

// text: what the token completed (UTF-8 safe; "" when none or the model has no tokenizer).
public record Event(long sequenceId, int token, String text, FinishReason finishReason) {
  /** KVT_NO_TOKEN: the event of a cancellation or failure reported without a token. */
  public static final int NO_TOKEN = -1;

  public boolean hasToken() { return token != NO_TOKEN; }

  public boolean isFinal() { return finishReason != FinishReason.NONE; }
}
