// Progress reports of a long call (loading a model, creating a context) that may cancel it.
using System;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;

namespace Kvtier
{
    /// <summary>Hears the progress of a long call, stage by stage, on the thread that made the
    /// call: how much of the stage is done out of total, in the stage's unit; every stage reports
    /// done = 0 first and done = total last. Return false to cancel the call, which then throws
    /// KvtierException with Status.Cancelled; an exception it throws cancels the call and is
    /// thrown by it. Stages of Model.Load: "files", "tensors", "tokenizer"; of Context.Create
    /// (ContextOptions.Progress): "weights" (bytes), "kv_pools", "warmup".</summary>
    public delegate bool ProgressCallback(string stage, long done, long total);

    /// <summary>One call's progress callback as a native function pointer.</summary>
    internal sealed class ProgressCall
    {
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        private delegate int NativeProgress(IntPtr userData, IntPtr stage, long done, long total);

        private readonly ProgressCallback callback;
        private readonly NativeProgress native;
        private Exception thrown;

        internal ProgressCall(ProgressCallback callback)
        {
            this.callback = callback;
            native = Invoke;
        }

        /// <summary>Valid while this object is alive (GC.KeepAlive it past the native call).</summary>
        internal IntPtr FunctionPointer => Marshal.GetFunctionPointerForDelegate(native);

        private int Invoke(IntPtr userData, IntPtr stage, long done, long total)
        {
            if (thrown != null) return 1;
            try { return callback(Library.Utf8(stage), done, total) ? 0 : 1; }
            catch (Exception e)
            {
                thrown = e; // must not unwind into the native caller: cancel, rethrow after
                return 1;
            }
        }

        /// <summary>Throws what the callback threw, if anything.</summary>
        internal void Rethrow()
        {
            if (thrown != null) ExceptionDispatchInfo.Capture(thrown).Throw();
        }
    }
}
