// The result of a blocking generation: the generated tokens and why it stopped.
package dev.kvtier;

/**
 * The result of {@link Context#generate}.
 *
 * @param tokens the generated tokens (not the prompt)
 * @param finishReason why generation stopped
 */
public record Generation(int[] tokens, FinishReason finishReason) {}
