// A token and its log-probability.
package dev.kvtier;

/**
 * A token and its log-probability under the model's raw distribution.
 *
 * @param token the token id
 * @param logprob its natural-log probability
 */
public record TokenLogprob(int token, float logprob) {}
