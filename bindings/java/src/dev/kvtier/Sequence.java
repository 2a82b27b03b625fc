// A sequence added to a Context: its events arrive as the driving thread steps, and are
// read here by iteration (blocking until the next event) from any one thread.
// close() cancels it if still running and forgets its record.
package dev.kvtier;

import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

/**
 * A sequence being generated. Its events arrive as the context is stepped; iterate over it
 * (or {@link #stream()}, {@link #take()}) from one thread to read them, blocking until the
 * next one. Close it when done: a sequence still running is cancelled.
 */
public final class Sequence implements AutoCloseable, Iterable<Event> {
  private final Context context;
  private final long id;
  // Unbounded (a sequence reports at most max_new_tokens + 1 events): step() never blocks.
  private final BlockingQueue<Event> queue;
  private volatile FinishReason finish = FinishReason.NONE;
  private boolean consumedFinal;
  boolean closeRequested; // guarded by the context's map of open sequences

  Sequence(Context context, long id) {
    this.context = context;
    this.id = id;
    this.queue = new LinkedBlockingQueue<>();
  }

  /**
   * The sequence id.
   *
   * @return the id (&gt; 0, never reused in a context)
   */
  public long id() { return id; }

  /**
   * Whether the final event has been delivered.
   *
   * @return true once finished
   */
  public boolean isFinished() { return finish != FinishReason.NONE; }

  /**
   * Why the sequence stopped.
   *
   * @return {@link FinishReason#NONE} until the final event has been delivered
   */
  public FinishReason finishReason() { return finish; }

  /**
   * Asks the engine to stop the sequence; the next step reports {@link FinishReason#CANCELLED}.
   *
   * @throws KvtierException STATE when it has already finished
   */
  public void cancel() { context.cancel(id); }

  /**
   * Waits for the next event.
   *
   * @return the event; null once the final event has been returned
   * @throws InterruptedException when the waiting thread is interrupted
   */
  public Event take() throws InterruptedException {
    synchronized (this) {
      if (consumedFinal) return null;
    }
    Event e = queue.take();
    if (e.isFinal()) {
      synchronized (this) { consumedFinal = true; }
    }
    return e;
  }

  /**
   * The events until (and including) the final one; blocks while the context is stepped.
   *
   * @return an iterator over the events
   */
  @Override
  public Iterator<Event> iterator() {
    return new Iterator<Event>() {
      private Event next;

      @Override
      public boolean hasNext() {
        if (next == null) {
          try {
            next = take();
          } catch (InterruptedException ex) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", ex);
          }
        }
        return next != null;
      }

      @Override
      public Event next() {
        if (!hasNext()) throw new NoSuchElementException();
        Event e = next;
        next = null;
        return e;
      }
    };
  }

  /**
   * The events as a sequential stream (see {@link #iterator()}).
   *
   * @return a stream of the events
   */
  public Stream<Event> stream() {
    return StreamSupport.stream(
        Spliterators.spliteratorUnknownSize(iterator(), Spliterator.ORDERED), false);
  }

  /**
   * The tokens produced so far (from the engine's record).
   *
   * @return the generated tokens
   */
  public int[] tokens() { return context.tokens(id); }

  /**
   * The prompt as it was added (tokenized, in the chat format).
   *
   * @return the prompt's tokens
   */
  public int[] promptTokens() { return context.promptTokens(id); }

  /**
   * The text produced so far.
   *
   * @return the generated text
   * @throws KvtierException UNSUPPORTED when the model has no tokenizer
   */
  public String text() { return context.text(id); }

  /**
   * Why the sequence finished with {@link FinishReason#ERROR}.
   *
   * @return the reason, or "" when it did not fail
   */
  public String errorMessage() { return context.sequenceError(id); }

  /**
   * Forgets the sequence's record; a sequence still running is cancelled first and forgotten
   * when its final event arrives.
   */
  @Override
  public void close() { context.closeSequence(this); }

  /** Called by the context with its lock held; true when this was the final event. */
  boolean deliver(Event e) {
    if (isFinished()) return false;
    queue.offer(e);
    if (e.isFinal()) finish = e.finishReason();
    return e.isFinal();
  }
}
