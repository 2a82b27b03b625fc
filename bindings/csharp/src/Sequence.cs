// A sequence added to a Context: its events arrive as the driving thread steps and are read
// by enumerating it (blocking until the next event) from any one thread. Dispose cancels it
// if still running and forgets its record.
using System;
using System.Collections;
using System.Collections.Concurrent;
using System.Collections.Generic;

namespace Kvtier
{
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

        public long Id { get; }
        public bool IsFinished => finish != (int)FinishReason.None;
        public FinishReason FinishReason => (FinishReason)finish;

        /// <summary>Asks the engine to stop it; the next step reports Cancelled.</summary>
        public void Cancel() { context.Cancel(Id); }

        /// <summary>Tokens produced so far (from the engine's record).</summary>
        public int[] Tokens() => context.Tokens(Id);

        /// <summary>Events until (and including) the final one; blocks while the context is stepped.</summary>
        public IEnumerator<Event> GetEnumerator()
        {
            foreach (Event e in queue.GetConsumingEnumerable())
            {
                yield return e;
                if (e.IsFinal) yield break;
            }
        }

        IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();

        /// <summary>Text produced so far (Unsupported when the model has no tokenizer).</summary>
        public string Text() => context.Text(Id);

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
    }
}
