// One event of a step: a sequence produced a token and/or finished.
package dev.kvtier;

/**
 * One event of a step: a sequence produced a token and/or finished.
 *
 * @param sequenceId the sequence the event belongs to
 * @param token the token produced, or {@link #NO_TOKEN}
 * @param text what the token completed (never a partial UTF-8 character; {@code ""} when
 *     none or the model has no tokenizer)
 * @param finishReason why the sequence stopped; {@link FinishReason#NONE} while it goes on
 * @param logprobs the token's log-probabilities when its request asked for them
 *     ({@link Request#logprobs}); null otherwise
 */
public record Event(long sequenceId, int token, String text, FinishReason finishReason,
    TokenLogprobs logprobs) {
  /** KVT_NO_TOKEN: the event of a cancellation or failure reported without a token. */
  public static final int NO_TOKEN = -1;

  /**
   * An event without log-probabilities.
   *
   * @param sequenceId the sequence the event belongs to
   * @param token the token produced, or {@link #NO_TOKEN}
   * @param text what the token completed
   * @param finishReason why the sequence stopped
   */
  public Event(long sequenceId, int token, String text, FinishReason finishReason) {
    this(sequenceId, token, text, finishReason, null);
  }

  /**
   * Whether the event carries a token.
   *
   * @return true unless the token is {@link #NO_TOKEN}
   */
  public boolean hasToken() { return token != NO_TOKEN; }

  /**
   * Whether this is the sequence's last event.
   *
   * @return true when the finish reason is not {@link FinishReason#NONE}
   */
  public boolean isFinal() { return finishReason != FinishReason.NONE; }
}
