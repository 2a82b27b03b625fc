// Plain types of the C# binding: statuses, finish reasons, states, events, the exception.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Kvtier
{
    /// <summary>Status codes of the C API (kvt_status).</summary>
    public enum Status
    {
        /// <summary>Success (never in a KvtierException).</summary>
        Ok = 0,
        /// <summary>A parameter is out of range or malformed.</summary>
        InvalidArgument = 1,
        /// <summary>Unknown sequence id, missing file or tensor.</summary>
        NotFound = 2,
        /// <summary>Architecture, dtype, tokenizer or backend not supported.</summary>
        Unsupported = 3,
        /// <summary>The request can never fit in the configured memory.</summary>
        Capacity = 4,
        /// <summary>The waiting queue is full: retry later (back-pressure).</summary>
        Busy = 5,
        /// <summary>A file could not be read or written.</summary>
        IO = 6,
        /// <summary>A file or stored block failed validation.</summary>
        Corrupt = 7,
        /// <summary>An allocation at creation time failed.</summary>
        OutOfMemory = 8,
        /// <summary>The call is not valid in the object's current state.</summary>
        State = 9,
        /// <summary>The compute backend failed (e.g. a CUDA error).</summary>
        Backend = 10,
        /// <summary>A bug in kvtier: please report it.</summary>
        Internal = 11,
        /// <summary>A progress callback cancelled the call.</summary>
        Cancelled = 12
    }

    /// <summary>Why a sequence stopped (kvt_finish_reason).</summary>
    public enum FinishReason
    {
        /// <summary>Still running.</summary>
        None = 0,
        /// <summary>A stop/eos token or a stop string was produced.</summary>
        Stop = 1,
        /// <summary>MaxNewTokens reached, or the context is full.</summary>
        Length = 2,
        /// <summary>Cancelled (Cancel, a cancelled token, Dispose).</summary>
        Cancelled = 3,
        /// <summary>The sequence failed alone.</summary>
        Error = 4,
        /// <summary>The output is complete per the request's JSON schema or grammar
        /// (Request.JsonSchema, Request.Grammar); a constrained sequence that ends any other
        /// way is incomplete.</summary>
        Grammar = 5
    }

    /// <summary>Where a sequence is in its life (kvt_sequence_state).</summary>
    public enum SequenceState
    {
        /// <summary>Admitted, not yet scheduled.</summary>
        Waiting = 0,
        /// <summary>Prefilling or decoding.</summary>
        Running = 1,
        /// <summary>Preempted: KV swapped out or dropped for recompute.</summary>
        Paused = 2,
        /// <summary>See its finish reason.</summary>
        Finished = 3
    }

    /// <summary>The error of every failing kvtier call: the status and the library's message.</summary>
    public class KvtierException : Exception
    {
        /// <summary>The C API status.</summary>
        public Status Status { get; }
        /// <summary>The library's message alone, without the status name.</summary>
        public string Detail { get; }

        internal KvtierException(int code, string detail)
            : base(Native.kvtier.kvt_status_string(code) + ": " + detail)
        {
            Status = code >= 0 && code <= 12 ? (Status)code : Status.Internal;
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

        /// <summary>The sequence the event belongs to.</summary>
        public long SequenceId { get; }
        /// <summary>The token produced, or NoToken.</summary>
        public int Token { get; }
        /// <summary>What the token completed (never a partial character; "" when none).</summary>
        public string Text { get; }
        /// <summary>Why the sequence stopped; None while it goes on.</summary>
        public FinishReason FinishReason { get; }
        /// <summary>The token's log-probabilities when its request asked for them
        /// (Request.Logprobs); null otherwise.</summary>
        public TokenLogprobs Logprobs { get; }
        /// <summary>True when the event carries a token.</summary>
        public bool HasToken => Token != NoToken;
        /// <summary>True for the sequence's last event.</summary>
        public bool IsFinal => FinishReason != FinishReason.None;

        internal Event(long sequenceId, int token, string text, FinishReason reason, TokenLogprobs logprobs = null)
        {
            SequenceId = sequenceId;
            Token = token;
            Text = text;
            FinishReason = reason;
            Logprobs = logprobs;
        }
    }

    /// <summary>A token and its log-probability under the model's raw distribution.</summary>
    public struct TokenLogprob
    {
        /// <summary>The token id.</summary>
        public int Token { get; }
        /// <summary>Its natural-log probability.</summary>
        public float Logprob { get; }

        internal TokenLogprob(int token, float logprob)
        {
            Token = token;
            Logprob = logprob;
        }
    }

    /// <summary>A token's log-probability under the model's raw distribution (before the
    /// sampler chain) and its most likely alternatives, most likely first. In
    /// Context.PromptLogprobs, Token is Event.NoToken: entry j scores the prompt's token j + 1.</summary>
    public sealed class TokenLogprobs
    {
        /// <summary>The token id.</summary>
        public int Token { get; }
        /// <summary>Its natural-log probability.</summary>
        public float Logprob { get; }
        /// <summary>The alternatives asked for, most likely first.</summary>
        public IReadOnlyList<TokenLogprob> Top { get; }

        internal TokenLogprobs(int token, float logprob, IReadOnlyList<TokenLogprob> top)
        {
            Token = token;
            Logprob = logprob;
            Top = top;
        }

        /// <summary>Equal token, log-probability and alternatives.</summary>
        public override bool Equals(object obj)
        {
            var o = obj as TokenLogprobs;
            return o != null && o.Token == Token && o.Logprob == Logprob && Top.SequenceEqual(o.Top);
        }

        /// <summary>A hash of the token and its log-probability.</summary>
        public override int GetHashCode() => Token * 31 + Logprob.GetHashCode();
    }

    /// <summary>The result of a blocking generation.</summary>
    public sealed class Generation
    {
        /// <summary>The generated tokens (not the prompt).</summary>
        public int[] Tokens { get; }
        /// <summary>Why generation stopped.</summary>
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
        /// <summary>Run-time version of the loaded native library, e.g. "0.1.0".</summary>
        public static string Version => Native.kvtier.kvt_version_string();
        /// <summary>Major version of the loaded native library.</summary>
        public static int VersionMajor => Native.kvtier.kvt_version_major();
        /// <summary>Minor version of the loaded native library.</summary>
        public static int VersionMinor => Native.kvtier.kvt_version_minor();
        /// <summary>Patch version of the loaded native library.</summary>
        public static int VersionPatch => Native.kvtier.kvt_version_patch();

        /// <summary>"KVT_ERR_BUSY" for Status.Busy.</summary>
        public static string StatusString(Status status) => Native.kvtier.kvt_status_string((int)status);

        /// <summary>Native handles alive in this process; 0 once everything is disposed or
        /// finalized.</summary>
        public static long LiveHandles => Native.kvtier.kvt_live_handles();

        /// <summary>The NUL-terminated UTF-8 string native code points at.</summary>
        internal static string Utf8(IntPtr p)
        {
            if (p == IntPtr.Zero) return "";
            int n = 0;
            while (System.Runtime.InteropServices.Marshal.ReadByte(p, n) != 0) ++n;
            var bytes = new byte[n];
            System.Runtime.InteropServices.Marshal.Copy(p, bytes, 0, n);
            return System.Text.Encoding.UTF8.GetString(bytes);
        }

        /// <summary>The NUL-terminated UTF-8 string at the start of buf.</summary>
        internal static string CString(byte[] buf)
        {
            int n = Array.IndexOf(buf, (byte)0);
            return System.Text.Encoding.UTF8.GetString(buf, 0, n < 0 ? buf.Length : n);
        }
    }
}
