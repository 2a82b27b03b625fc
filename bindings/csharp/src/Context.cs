// One engine: KV pools, scheduler, sequences. Add, Cancel, the sequence readers and the
// statistics may be called from any thread while one thread drives Step() or Run(); Dispose
// waits for the calls in progress and ends every open Sequence.
using System;
using System.Collections.Generic;
using System.Text.RegularExpressions;
using System.Threading;
using Kvtier.Native;

// The tests call internal helpers that no public member can reach deterministically.
[assembly: System.Runtime.CompilerServices.InternalsVisibleTo("Kvtier.Tests")]

namespace Kvtier
{
    /// <summary>One engine: KV memory pools allocated whole at creation, a scheduler, sequences.
    /// One thread drives it (Step, Run, RunUntilIdle, Generate); any thread may Add, Cancel,
    /// read sequences and statistics. Dispose frees the pools at once; a Context never disposed
    /// is freed by its finalizer.</summary>
    public sealed class Context : IDisposable
    {
        // null once disposed. The handles' finalizers free what Dispose was not called for.
        private ContextHandle handle;
        private EventsHandle events;
        // Read: any call using the handle. Write: Dispose.
        private readonly ReaderWriterLockSlim life = new ReaderWriterLockSlim(LockRecursionPolicy.SupportsRecursion);
        private readonly object stepper = new object();
        // Open sequences by id. Add registers while holding it and Step dispatches while
        // holding it, so no event reaches an unknown id.
        private readonly Dictionary<long, Sequence> open = new Dictionary<long, Sequence>();
        // Wakes a Run waiting for work instead of polling: Add releases it (holding the lock of
        // open, and only when free: at most one permit), and so does Dispose, to end that Run.
        private readonly SemaphoreSlim added = new SemaphoreSlim(0, 1);
        private volatile bool disposed;

        private Context(ContextHandle c, EventsHandle e) { handle = c; events = e; }

        /// <summary>Creates a context on a model; options may be null (defaults).</summary>
        public static Context Create(Model model, ContextOptions options = null)
        {
            using (OptionsHandle o = (options ?? new ContextOptions()).ToNative())
            {
                SWIGTYPE_p_p_kvt_context box = kvtier.new_kvt_context_box();
                SWIGTYPE_p_p_kvt_events ebox = kvtier.new_kvt_events_box();
                try
                {
                    var err = new byte[1024];
                    ProgressCall call = options?.ProgressCallback == null ? null : new ProgressCall(options.ProgressCallback);
                    if (call != null)
                    {
                        KvtierException.Check(kvtier.kvt_options_set_progress_callback(o.Swig, call.FunctionPointer, IntPtr.Zero),
                                               "kvt_options_set_progress_callback");
                    }
                    int created = model.Use(m => kvtier.kvt_context_create(m, o.Swig, box, err, err.Length));
                    GC.KeepAlive(call);
                    call?.Rethrow(); // it cancelled the creation: nothing was created
                    KvtierException.Check(created, Library.CString(err));
                    var c = new ContextHandle(kvtier.kvt_context_box_value(box));
                    int st = kvtier.kvt_events_create(ebox);
                    if (st != 0)
                    {
                        c.Dispose();
                        KvtierException.Check(st, "kvt_events_create");
                    }
                    var context = new Context(c, new EventsHandle(kvtier.kvt_events_box_value(ebox)));
                    c.AddMemoryPressure(context.HostMemoryBytes());
                    return context;
                }
                finally
                {
                    kvtier.delete_kvt_events_box(ebox);
                    kvtier.delete_kvt_context_box(box);
                }
            }
        }

        // Bytes of ordinary or pinned host memory the context holds: the host tier's pool, and
        // on the CPU backend everything it allocated as "device" memory (the device tier's pool
        // and the workspace), which is host memory there.
        private long HostMemoryBytes()
        {
            long bytes = Stat("tiers.host.capacity_bytes");
            if (Regex.IsMatch(StatsJson(), "\"backend\"\\s*:\\s*\"cpu\""))
                bytes += Stat("device_bytes_in_use");
            return bytes;
        }

        /// <summary>Admits a sequence; read its events by enumerating it, dispose it when done.
        /// A request for N &gt; 1 completions is refused (InvalidArgument): use AddCompletions.</summary>
        public Sequence Add(Request request)
        {
            if (request.Completions > 1)
                throw new KvtierException((int)Status.InvalidArgument, "the request asks for N > 1 completions: use AddCompletions");
            return AddCompletions(request)[0];
        }

        /// <summary>Admits the request's N completions, which share the prompt's KV blocks;
        /// completion i draws from the seed + i and equals the request run alone with that seed
        /// and N = 1. One Sequence each (ids consecutive); dispose each when done.</summary>
        public IReadOnlyList<Sequence> AddCompletions(Request request)
        {
            RequestHandle r = request.ToNative();
            try
            {
                SWIGTYPE_p_kvt_context c = Acquire();
                try
                {
                    var id = new long[1];
                    lock (open)
                    {
                        Check(kvtier.kvt_sequence_add(c, r.Swig, id));
                        var list = new List<Sequence>();
                        for (int i = 0; i < request.Completions; ++i)
                        {
                            var s = new Sequence(this, id[0] + i);
                            open[s.Id] = s;
                            list.Add(s);
                        }
                        if (added.CurrentCount == 0) added.Release();
                        return list;
                    }
                }
                finally { life.ExitReadLock(); }
            }
            finally { r.Dispose(); }
        }

        /// <summary>Runs one scheduler iteration; returns its events (also delivered to the Sequences).</summary>
        public List<Event> Step()
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                lock (stepper)
                {
                    SWIGTYPE_p_kvt_events events = this.events.Swig;
                    Check(kvtier.kvt_step(c, events));
                    int n = kvtier.kvt_events_count(events);
                    var list = new List<Event>(n);
                    var seq = new long[1];
                    var token = new int[1];
                    var reason = new int[1];
                    for (int i = 0; i < n; ++i)
                    {
                        KvtierException.Check(kvtier.kvt_events_get(events, i, seq, token, reason), "kvt_events_get");
                        list.Add(new Event(seq[0], token[0], EventText(events, i), (FinishReason)reason[0],
                                           EventLogprobs(events, i, token[0])));
                    }
                    lock (open)
                    {
                        foreach (Event e in list)
                        {
                            Sequence s;
                            if (open.TryGetValue(e.SequenceId, out s) && s.Deliver(e) && s.CloseRequested)
                            {
                                open.Remove(e.SequenceId);
                                kvtier.kvt_sequence_release(c, e.SequenceId);
                            }
                        }
                    }
                    return list;
                }
            }
            finally { life.ExitReadLock(); }
        }

        private byte[] textBuf = new byte[256]; // guarded by stepper

        private static TokenLogprobs EventLogprobs(SWIGTYPE_p_kvt_events events, int i, int token)
        {
            var logprob = new float[1];
            var numTop = new int[1];
            if (kvtier.kvt_events_logprob(events, i, logprob, numTop) != 0) return null;
            var tokens = new int[numTop[0]];
            var values = new float[numTop[0]];
            if (numTop[0] > 0)
                KvtierException.Check(kvtier.kvt_events_top_logprobs(events, i, tokens, values, tokens.Length, numTop),
                                      "kvt_events_top_logprobs");
            return new TokenLogprobs(token, logprob[0], TopOf(tokens, values, tokens.Length));
        }

        private static IReadOnlyList<TokenLogprob> TopOf(int[] tokens, float[] values, int n)
        {
            var top = new List<TokenLogprob>(n);
            for (int j = 0; j < n; ++j) top.Add(new TokenLogprob(tokens[j], values[j]));
            return top.AsReadOnly();
        }

        /// <summary>Log-probabilities of the tokens a sequence generated so far, with their
        /// alternatives (State when its request did not ask: Request.Logprobs).</summary>
        public List<TokenLogprobs> Logprobs(long id) => LogprobList(id, Tokens(id), true);

        /// <summary>Log-probabilities of a sequence's prompt tokens from the second on (entry j
        /// scores token j + 1), once computed (State when its request did not ask:
        /// Request.PromptLogprobs).</summary>
        public List<TokenLogprobs> PromptLogprobs(long id) => LogprobList(id, new int[0], false);

        private List<TokenLogprobs> LogprobList(long id, int[] tokens, bool generated)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var len = new int[1];
                var none = new float[0];
                Check(generated ? kvtier.kvt_sequence_logprobs(c, id, none, 0, len)
                                : kvtier.kvt_sequence_prompt_logprobs(c, id, none, 0, len));
                var values = new float[len[0]];
                Check(generated ? kvtier.kvt_sequence_logprobs(c, id, values, values.Length, len)
                                : kvtier.kvt_sequence_prompt_logprobs(c, id, values, values.Length, len));
                var list = new List<TokenLogprobs>(values.Length);
                var topTokens = new int[20];
                var topValues = new float[20];
                for (int j = 0; j < values.Length; ++j)
                {
                    var n = new int[1];
                    Check(generated ? kvtier.kvt_sequence_top_logprobs(c, id, j, topTokens, topValues, 20, n)
                                    : kvtier.kvt_sequence_prompt_top_logprobs(c, id, j, topTokens, topValues, 20, n));
                    list.Add(new TokenLogprobs(j < tokens.Length ? tokens[j] : Event.NoToken, values[j],
                                               TopOf(topTokens, topValues, Math.Min(n[0], 20))));
                }
                return list;
            }
            finally { life.ExitReadLock(); }
        }

        private string EventText(SWIGTYPE_p_kvt_events events, int i)
        {
            int n = kvtier.kvt_events_text_copy(events, i, textBuf, textBuf.Length);
            if (n < 0) throw new KvtierException(-n, "kvt_events_text");
            if (n >= textBuf.Length)
            {
                textBuf = new byte[n + 1];
                kvtier.kvt_events_text_copy(events, i, textBuf, textBuf.Length);
            }
            return System.Text.Encoding.UTF8.GetString(textBuf, 0, n);
        }

        /// <summary>Steps until no sequence is unfinished; returns the number of steps.</summary>
        public int RunUntilIdle()
        {
            int steps = 0;
            while (NumUnfinished > 0) { Step(); ++steps; }
            return steps;
        }

        /// <summary>Drives the context until cancellationToken is cancelled or the context is
        /// disposed: steps while sequences are unfinished and sleeps until the next Add
        /// otherwise. Sequences still unfinished when it returns stay in the context.</summary>
        public void Run(CancellationToken cancellationToken)
        {
            try
            {
                while (!cancellationToken.IsCancellationRequested && !disposed)
                {
                    if (NumUnfinished > 0)
                    {
                        Step();
                        continue;
                    }
                    added.Wait(cancellationToken);
                }
            }
            catch (OperationCanceledException) { }
            catch (ObjectDisposedException) when (disposed) { } // disposed between two checks
        }

        /// <summary>Blocking generation: adds the request and steps until it finishes.</summary>
        public Generation Generate(Request request) => Generate(request, CancellationToken.None);

        /// <summary>Blocking generation that cancellationToken can stop: the sequence is then
        /// cancelled, stepped to its end (its KV memory freed) and OperationCanceledException
        /// thrown.</summary>
        public Generation Generate(Request request, CancellationToken cancellationToken)
        {
            using (Sequence s = Add(request))
            {
                bool cancelled = false;
                while (!s.IsFinished)
                {
                    if (!cancelled && cancellationToken.IsCancellationRequested)
                    {
                        cancelled = true;
                        try { s.Cancel(); }
                        catch (KvtierException e) when (e.Status == Status.State) { } // finished first
                    }
                    Step();
                }
                if (cancelled) cancellationToken.ThrowIfCancellationRequested();
                return new Generation(s.Tokens(), s.FinishReason);
            }
        }

        /// <summary>Cancels a waiting, running or paused sequence; the next step reports it.
        /// Throws Status.State for a finished sequence, Status.NotFound for an unknown id.</summary>
        public void Cancel(long id)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try { Check(kvtier.kvt_sequence_cancel(c, id)); }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Where a sequence is in its life.</summary>
        public SequenceState State(long id)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var state = new int[1];
                var reason = new int[1];
                Check(kvtier.kvt_sequence_status(c, id, state, reason));
                return (SequenceState)state[0];
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Tokens generated so far by a sequence whose record is kept.</summary>
        public int[] Tokens(long id)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var len = new int[1];
                Check(kvtier.kvt_sequence_tokens(c, id, new int[0], 0, len));
                var buf = new int[len[0]];
                Check(kvtier.kvt_sequence_tokens(c, id, buf, buf.Length, len));
                if (len[0] < buf.Length) Array.Resize(ref buf, len[0]);
                return buf;
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>A sequence's prompt as it was added (a text prompt tokenized, chat messages in
        /// the model's chat format), while its record is kept.</summary>
        public int[] PromptTokens(long id)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var len = new int[1];
                Check(kvtier.kvt_sequence_prompt_tokens(c, id, new int[0], 0, len));
                var buf = new int[len[0]];
                Check(kvtier.kvt_sequence_prompt_tokens(c, id, buf, buf.Length, len));
                return buf;
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Text generated so far by a sequence whose record is kept (Unsupported without a tokenizer).</summary>
        public string Text(long id)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var len = new int[1];
                Check(kvtier.kvt_sequence_text(c, id, new byte[1], 1, len));
                var buf = new byte[len[0] + 1];
                Check(kvtier.kvt_sequence_text(c, id, buf, buf.Length, len));
                return System.Text.Encoding.UTF8.GetString(buf, 0, Math.Min(len[0], buf.Length - 1));
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Sequences waiting, running or paused.</summary>
        public int NumUnfinished
        {
            get
            {
                SWIGTYPE_p_kvt_context c = Acquire();
                try { return kvtier.kvt_context_num_unfinished(c); }
                finally { life.ExitReadLock(); }
            }
        }

        /// <summary>Statistics as a JSON object.</summary>
        public string StatsJson()
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var len = new int[1];
                return CopyGrowingText(buf =>
                {
                    Check(kvtier.kvt_context_stats_json(c, buf, buf.Length, len));
                    return len[0];
                });
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>The statistics in the Prometheus text exposition format (version 0.0.4), to
        /// serve on /metrics as they are: counters, gauges (tier usage) and histograms of time to
        /// first token, inter-token latency and step duration.</summary>
        public string MetricsText()
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var len = new int[1];
                return CopyGrowingText(buf =>
                {
                    Check(kvtier.kvt_context_metrics_text(c, buf, buf.Length, len));
                    return len[0];
                });
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Releases every prefix pinned by a Request with PinPrefix; the blocks stay
        /// cached but become evictable.</summary>
        public void UnpinPrefixes()
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try { Check(kvtier.kvt_context_unpin_prefixes(c)); }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Why a sequence finished with FinishReason.Error ("" when it did not fail),
        /// while its record is kept; NotFound for an unknown or released id.</summary>
        public string SequenceError(long id)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var len = new int[1];
                Check(kvtier.kvt_sequence_error(c, id, new byte[1], 1, len));
                var buf = new byte[len[0] + 1];
                Check(kvtier.kvt_sequence_error(c, id, buf, buf.Length, len));
                return Library.CString(buf);
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>One statistic by its JSON name, e.g. "tiers.gpu.used_bytes".</summary>
        public long Stat(string name)
        {
            SWIGTYPE_p_kvt_context c = Acquire();
            try
            {
                var value = new long[1];
                Check(kvtier.kvt_context_stat(c, name, value));
                return value[0];
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Sequence.Dispose: forget a finished sequence, or cancel a running one
        /// whose record Step releases when it finishes.</summary>
        internal void CloseSequence(Sequence s)
        {
            life.EnterReadLock();
            try
            {
                if (handle == null) return;
                lock (open)
                {
                    if (!open.ContainsKey(s.Id)) return;
                    if (s.IsFinished)
                    {
                        open.Remove(s.Id);
                        kvtier.kvt_sequence_release(handle.Swig, s.Id);
                    }
                    else
                    {
                        s.CloseRequested = true;
                        kvtier.kvt_sequence_cancel(handle.Swig, s.Id);
                    }
                }
            }
            finally { life.ExitReadLock(); }
        }

        /// <summary>Frees the context and its memory pools; open Sequences receive a final
        /// Cancelled event. Waits for calls in progress on other threads. Calling it again does
        /// nothing.</summary>
        public void Dispose()
        {
            life.EnterWriteLock();
            try
            {
                if (handle == null) return;
                lock (open)
                {
                    foreach (Sequence s in open.Values)
                        s.Deliver(new Event(s.Id, Event.NoToken, "", FinishReason.Cancelled));
                    open.Clear();
                }
                events.Dispose();
                handle.Dispose();
                events = null;
                handle = null;
                disposed = true;
                lock (open)
                {
                    if (added.CurrentCount == 0) added.Release();
                }
            }
            finally { life.ExitWriteLock(); }
        }

        // Takes the read lock and returns the native context; the caller releases the lock.
        // Holding it keeps Dispose (the write lock) out; the finalizer cannot run while this
        // object is in use.
        private SWIGTYPE_p_kvt_context Acquire()
        {
            life.EnterReadLock();
            if (handle == null)
            {
                life.ExitReadLock();
                throw new ObjectDisposedException("Context");
            }
            return handle.Swig;
        }

        // The whole text `copy` writes: copy(buf) copies it into buf (NUL-terminated, cut short
        // when it does not fit) and returns its full length. The length a first call reports can
        // be too small by the time of the copy (the stepping and I/O threads move the counters
        // in between, and a number can gain a digit), so the copy is made again, in a buffer at
        // least twice as large, until the text fits.
        internal static string CopyGrowingText(Func<byte[], int> copy)
        {
            var buf = new byte[1]; // the first call only sizes the text
            for (;;)
            {
                int len = copy(buf);
                if (len < buf.Length) // all of it, and its NUL
                {
                    return System.Text.Encoding.UTF8.GetString(buf, 0, len);
                }
                // Room to spare, so a counter that grows between the calls rarely costs another copy.
                buf = new byte[Math.Max(len + 1 + 256, 2 * buf.Length)];
            }
        }

        private void Check(int status)
        {
            if (status == 0) return;
            var buf = new byte[1024];
            kvtier.kvt_context_errmsg_copy(handle.Swig, buf, buf.Length);
            throw new KvtierException(status, Library.CString(buf));
        }
    }
}
