// The result of a blocking generation: the generated tokens and why it stopped.
package dev.kvtier;

public record Generation(int[] tokens, FinishReason finishReason) {}
