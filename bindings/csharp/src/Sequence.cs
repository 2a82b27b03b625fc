// A sequence added to a Context: its events arrive as the driving thread steps and are read
// by enumerating it (blocking until the next event) from any one thread. Dispose cancels it
// if still running and forgets its record.
using System;
using System.Collections;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;

namespace Kvtier
{
    /// <summary>A sequence being generated. Enumerate it (or <see cref="Events"/>) for its
    /// events as they are produced; the enumeration ends after the final event. Dispose it when
    /// done: a sequence still running is cancelled.</summary>
    public sealed class Sequence : IEnumerable<Event>, IDisposable
    {
        private readonly Context context;
        // Unbounded (at most max_new_tokens + 1 events): Step never blocks on it.
        private readonly BlockingCollection<Event> queue = new BlockingCollection<Event>();
        private volatile int finish; // FinishReason, None until the final event is delivered
        internal bool CloseRequested; // guarded by the context's map of open sequences

        internal Sequence(Context context, long id)
        {
            this.context = context;
            Id = id;
        }

        /// <summary>The sequence id (> 0, never reused in a context).</summary>
        public long Id { get; }
        /// <summary>True once the final event has been delivered.</summary>
        public bool IsFinished => finish != (int)FinishReason.None;
        /// <summary>Why it stopped; None until the final event has been delivered.</summary>
        public FinishReason FinishReason => (FinishReason)finish;

        /// <summary>Asks the engine to stop it; the next step reports Cancelled.</summary>
        public void Cancel() { context.Cancel(Id); }

        /// <summary>Tokens produced so far (from the engine's record).</summary>
        public int[] Tokens() => context.Tokens(Id);

        /// <summary>The prompt as it was added (tokenized, in the chat format).</summary>
        public int[] PromptTokens() => context.PromptTokens(Id);

        /// <summary>Events until (and including) the final one; blocks while the context is stepped.</summary>
        public IEnumerator<Event> GetEnumerator() => Events(CancellationToken.None).GetEnumerator();

        IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();

        /// <summary>Events until (and including) the final one, blocking while the context is
        /// stepped. When cancellationToken is cancelled the sequence is cancelled in the engine
        /// (its KV memory is freed by the next step) and the enumeration throws
        /// OperationCanceledException.</summary>
        public IEnumerable<Event> Events(CancellationToken cancellationToken)
        {
            using (cancellationToken.Register(CancelUnlessFinished))
            {
                foreach (Event e in queue.GetConsumingEnumerable(cancellationToken))
                {
                    yield return e;
                    if (e.IsFinal) yield break;
                }
            }
        }

        /// <summary>Text produced so far (Unsupported when the model has no tokenizer).</summary>
        public string Text() => context.Text(Id);

        /// <summary>Why the sequence finished with FinishReason.Error ("" otherwise).</summary>
        public string ErrorMessage() => context.SequenceError(Id);

        /// <summary>Forgets the sequence's record; a sequence still running is cancelled first and
        /// forgotten when its final event arrives.</summary>
        public void Dispose() { context.CloseSequence(this); }

        /// <summary>Called by the context with its lock held; true when this was the final event.</summary>
        internal bool Deliver(Event e)
        {
            if (IsFinished) return false;
            queue.Add(e);
            if (e.IsFinal)
            {
                finish = (int)e.FinishReason;
                queue.CompleteAdding();
            }
            return e.IsFinal;
        }

        // A token's cancellation callback: the sequence may have finished, or its context been
        // disposed, in the meantime; neither is an error here.
        private void CancelUnlessFinished()
        {
            if (IsFinished) return;
            try { context.Cancel(Id); }
            catch (KvtierException e) when (e.Status == Status.State || e.Status == Status.NotFound) { }
            catch (ObjectDisposedException) { }
        }
    }
}
