// The library's log messages, delivered to a C# handler. Thread-safe.
using System;
using System.Runtime.InteropServices;

namespace Kvtier
{
    /// <summary>Severity of a library message (kvt_log_level).</summary>
    public enum LogLevel
    {
        /// <summary>Detail for chasing a problem.</summary>
        Debug = 0,
        /// <summary>A notable event in normal operation.</summary>
        Info = 1,
        /// <summary>Something went wrong and was handled (a fallback, a block dropped, a write
        /// that failed); service goes on.</summary>
        Warn = 2,
        /// <summary>Something failed that a caller also sees as an error.</summary>
        Error = 3
    }

    /// <summary>Process-wide logging of the native library: a backend fallback and why, a tier
    /// disabled by its options, a corrupt disk block, a failed disk write. Off until a handler
    /// is set (the library never writes to stderr by itself).</summary>
    public static class Logging
    {
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        private delegate void NativeLog(IntPtr userData, int level, IntPtr message);

        private static readonly object gate = new object();
        // Kept alive while installed: the library holds its function pointer.
        private static readonly NativeLog native = Deliver;
        private static volatile Action<LogLevel, string> handler;

        /// <summary>Sends the library's messages at minLevel and above to handler (null: off).
        /// The handler may be called from any thread, several at once — the library's disk I/O
        /// threads log too — so it must be thread-safe, return quickly and not call kvtier (a
        /// context's lock may be held while it runs); what it throws is dropped. Once SetHandler returns, the previous handler is never called again.</summary>
        public static void SetHandler(Action<LogLevel, string> newHandler, LogLevel minLevel = LogLevel.Info)
        {
            lock (gate)
            {
                if (newHandler == null)
                {
                    KvtierException.Check(Native.kvtier.kvt_set_log_callback(IntPtr.Zero, IntPtr.Zero, 0),
                                           "kvt_set_log_callback");
                    handler = null;
                    return;
                }
                handler = newHandler;
                KvtierException.Check(Native.kvtier.kvt_set_log_callback(Marshal.GetFunctionPointerForDelegate(native),
                                                                         IntPtr.Zero, (int)minLevel),
                                       "kvt_set_log_callback: level out of range");
            }
        }

        private static void Deliver(IntPtr userData, int level, IntPtr message)
        {
            Action<LogLevel, string> h = handler;
            if (h == null) return;
            try { h((LogLevel)level, Library.Utf8(message)); }
            catch (Exception) { } // must not unwind into the native caller
        }
    }
}
