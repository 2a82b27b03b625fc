// Plain types of the C# binding: statuses, finish reasons, states, events, the exception.
using System;

namespace Kvtier
{
    /// <summary>Status codes of the C API (kvt_status).</summary>
    public enum Status
    {
        Ok = 0, InvalidArgument = 1, NotFound = 2, Unsupported = 3, Capacity = 4, Busy = 5,
        IO = 6, Corrupt = 7, OutOfMemory = 8, State = 9, Backend = 10, Internal = 11
    }

    /// <summary>Why a sequence stopped (kvt_finish_reason).</summary>
    public enum FinishReason { None = 0, Stop = 1, Length = 2, Cancelled = 3, Error = 4 }

    /// <summary>Where a sequence is in its life (kvt_sequence_state).</summary>
    public enum SequenceState { Waiting = 0, Running = 1, Paused = 2, Finished = 3 }

    /// <summary>The error of every failing kvtier call: the status and the library's message.</summary>
    public class KvtierException : Exception
    {
        public Status Status { get; }
        public string Detail { get; }

        internal KvtierException(int code, string detail)
            : base(Native.kvtier.kvt_status_string(code) + ": " + detail)
        {
            Status = code >= 0 && code <= 11 ? (Status)code : Status.Internal;
            Detail = detail;
        }

        internal static void Check(int status, string message)
        {
            if (status != 0) throw new KvtierException(status, message);
        }
    }

    /// <summary>One event of a step: a sequence produced a token and/or finished.</summary>
    public struct Event
    {
        /// <summary>KVT_NO_TOKEN: a cancellation or failure reported without a token.</summary>
        public const int NoToken = -1;

        public long SequenceId { get; }
        public int Token { get; }
        /// <summary>What the token completed (never a partial character; "" when none).</summary>
        public string Text { get; }
        public FinishReason FinishReason { get; }
        public bool HasToken => Token != NoToken;
        public bool IsFinal => FinishReason != FinishReason.None;

        internal Event(long sequenceId, int token, string text, FinishReason reason)
        {
            SequenceId = sequenceId;
            Token = token;
            Text = text;
            FinishReason = reason;
        }
    }

    /// <summary>The result of a blocking generation.</summary>
    public sealed class Generation
    {
        public int[] Tokens { get; }
        public FinishReason FinishReason { get; }

        internal Generation(int[] tokens, FinishReason reason)
        {
            Tokens = tokens;
            FinishReason = reason;
        }
    }

    /// <summary>Library-wide calls: version, the live-handle counter.</summary>
    public static class Library
    {
        public static string Version => Native.kvtier.kvt_version_string();
        public static int VersionMajor => Native.kvtier.kvt_version_major();
        public static int VersionMinor => Native.kvtier.kvt_version_minor();
        public static int VersionPatch => Native.kvtier.kvt_version_patch();

        /// <summary>"KVT_ERR_BUSY" for Status.Busy.</summary>
        public static string StatusString(Status status) => Native.kvtier.kvt_status_string((int)status);

        /// <summary>Native handles alive in this process; 0 once everything is disposed.</summary>
        public static long LiveHandles => Native.kvtier.kvt_live_handles();

        /// <summary>The NUL-terminated UTF-8 string at the start of buf.</summary>
        internal static string CString(byte[] buf)
        {
            int n = Array.IndexOf(buf, (byte)0);
            return System.Text.Encoding.UTF8.GetString(buf, 0, n < 0 ? buf.Length : n);
        }
    }
}
