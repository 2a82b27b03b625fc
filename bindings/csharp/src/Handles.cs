// Every native object of the C API as a SafeHandle: it is released exactly once, by Dispose
// or, when Dispose was never called, by the finalizer. Thread-safe (SafeHandle's own
// reference count and its atomic release).
using System;
using System.Runtime.InteropServices;
using Kvtier.Native;

namespace Kvtier
{
    /// <summary>A kvt_* pointer owned by this object (zero is invalid), and its SWIG view.</summary>
    internal abstract class KvtHandle<TSwig> : SafeHandle
    {
        protected KvtHandle(IntPtr p) : base(IntPtr.Zero, true) { SetHandle(p); }

        public override bool IsInvalid => handle == IntPtr.Zero;

        /// <summary>The SWIG view of the pointer, for the low layer's calls.</summary>
        internal abstract TSwig Swig { get; }

        /// <summary>Calls f with the pointer while holding a reference, so that neither a Dispose
        /// on another thread nor the finalizer frees it during the call; ObjectDisposedException
        /// once released.</summary>
        internal T Use<T>(Func<TSwig, T> f)
        {
            bool added = false;
            try
            {
                DangerousAddRef(ref added);
                return f(Swig);
            }
            finally
            {
                if (added) DangerousRelease();
            }
        }
    }

    internal sealed class ModelHandle : KvtHandle<SWIGTYPE_p_kvt_model>
    {
        internal ModelHandle(SWIGTYPE_p_kvt_model m) : base(SWIGTYPE_p_kvt_model.getCPtr(m).Handle) { }

        internal override SWIGTYPE_p_kvt_model Swig => new SWIGTYPE_p_kvt_model(handle, false);

        protected override bool ReleaseHandle()
        {
            kvtier.kvt_model_free(Swig);
            return true;
        }
    }

    /// <summary>A context and the memory pools it allocated. The pools' host-memory bytes are
    /// reported to the GC as memory pressure, so that contexts nobody disposed are collected
    /// (and their pools freed) before native memory runs short.</summary>
    internal sealed class ContextHandle : KvtHandle<SWIGTYPE_p_kvt_context>
    {
        private long pressure;

        internal ContextHandle(SWIGTYPE_p_kvt_context c) : base(SWIGTYPE_p_kvt_context.getCPtr(c).Handle) { }

        internal override SWIGTYPE_p_kvt_context Swig => new SWIGTYPE_p_kvt_context(handle, false);

        /// <summary>Called once, right after creation.</summary>
        internal void AddMemoryPressure(long bytes)
        {
            if (bytes <= 0) return;
            pressure = bytes;
            GC.AddMemoryPressure(bytes);
        }

        protected override bool ReleaseHandle()
        {
            kvtier.kvt_context_free(Swig);
            if (pressure > 0) GC.RemoveMemoryPressure(pressure);
            return true;
        }
    }

    internal sealed class EventsHandle : KvtHandle<SWIGTYPE_p_kvt_events>
    {
        internal EventsHandle(SWIGTYPE_p_kvt_events e) : base(SWIGTYPE_p_kvt_events.getCPtr(e).Handle) { }

        internal override SWIGTYPE_p_kvt_events Swig => new SWIGTYPE_p_kvt_events(handle, false);

        protected override bool ReleaseHandle()
        {
            kvtier.kvt_events_free(Swig);
            return true;
        }
    }

    internal sealed class OptionsHandle : KvtHandle<SWIGTYPE_p_kvt_options>
    {
        internal OptionsHandle(SWIGTYPE_p_kvt_options o) : base(SWIGTYPE_p_kvt_options.getCPtr(o).Handle) { }

        internal override SWIGTYPE_p_kvt_options Swig => new SWIGTYPE_p_kvt_options(handle, false);

        protected override bool ReleaseHandle()
        {
            kvtier.kvt_options_free(Swig);
            return true;
        }
    }

    internal sealed class RequestHandle : KvtHandle<SWIGTYPE_p_kvt_request>
    {
        internal RequestHandle(SWIGTYPE_p_kvt_request r) : base(SWIGTYPE_p_kvt_request.getCPtr(r).Handle) { }

        internal override SWIGTYPE_p_kvt_request Swig => new SWIGTYPE_p_kvt_request(handle, false);

        protected override bool ReleaseHandle()
        {
            kvtier.kvt_request_free(Swig);
            return true;
        }
    }
}
