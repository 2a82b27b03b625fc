/**
 * kvtier for Java: LLM text generation in-process, with the KV cache in fixed memory budgets
 * across device, host and disk tiers.
 *
 * <p>Load a {@link dev.kvtier.Model}, create a {@link dev.kvtier.Context} with
 * {@link dev.kvtier.ContextOptions}, add {@link dev.kvtier.Request}s and read each
 * {@link dev.kvtier.Sequence}'s {@link dev.kvtier.Event}s while one thread steps the context:
 *
 * <pre>{@code
 * try (Model model = Model.load("/models/llama");
 *      Context ctx = Context.create(model, new ContextOptions().gpuKvBytes(2L << 30))) {
 *   Generation g = ctx.generate(new Request(128000, 9906, 1917).maxNewTokens(64));
 *   System.out.println(Arrays.toString(g.tokens()) + " " + g.finishReason());
 * }
 * }</pre>
 *
 * <p>Every failing call throws {@link dev.kvtier.KvtierException} with the C API's status and
 * message. Models, contexts and sequences are {@link java.lang.AutoCloseable}; there are no
 * finalizers, so close them ({@link dev.kvtier.Kvtier#liveHandles()} returns to 0 once all
 * are closed).
 *
 * <p>The native libraries: {@code libkvtier_jni.so} is loaded from {@code java.library.path}
 * (the Debian package libkvtier-java puts it on the default path); the jar with the
 * {@code linux-x86_64} classifier also carries it and {@code libkvtier.so.0}, and extracts
 * and loads them when the system has none. {@code -Dkvtier.jni.library=FILE} names the JNI
 * library explicitly.
 */
package dev.kvtier;
