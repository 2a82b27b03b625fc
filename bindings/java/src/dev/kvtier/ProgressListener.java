// Progress reports of a long call (loading a model, creating a context).
package dev.kvtier;

/**
 * Hears the progress of a long call, stage by stage, on the thread that made the call, and
 * may cancel it. Every stage reports {@code done = 0} first and {@code done = total} last.
 * Stages of {@link Model#load(String, ProgressListener)}: {@code "files"}, {@code "tensors"},
 * {@code "tokenizer"}; of {@link Context#create} with {@link ContextOptions#progress}:
 * {@code "weights"} (bytes), {@code "kv_pools"}, {@code "warmup"}. A call cancelled by the
 * listener throws {@link KvtierException} with {@link Status#CANCELLED}; an exception the
 * listener throws cancels the call and is thrown by it.
 */
@FunctionalInterface
public interface ProgressListener {
  /**
   * One report.
   *
   * @param stage the stage's name
   * @param done how much of the stage is done, in the stage's unit
   * @param total the stage's total
   * @return true to go on, false to cancel the call
   */
  boolean onProgress(String stage, long done, long total);
}
