// A token's log-probability and its most likely alternatives.
package dev.kvtier;

import java.util.List;

/**
 * A token's log-probability under the model's raw distribution (before the sampler chain)
 * and its most likely alternatives, most likely first. In {@link Context#promptLogprobs},
 * {@code token} is {@link Event#NO_TOKEN}: entry j scores the prompt's token j + 1.
 *
 * @param token the token id
 * @param logprob its natural-log probability
 * @param top the alternatives asked for, most likely first
 */
public record TokenLogprobs(int token, float logprob, List<TokenLogprob> top) {}
