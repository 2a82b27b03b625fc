/* C# typemaps for kvtier.i: token arrays and scalar outs become pinned C# arrays,
 * byte buffers become byte[]. */
%include <arrays_csharp.i>
%include <enumsimple.swg>

/* Keep const char* a string: the char* buffer typemap below would otherwise match it. */
%apply char* { const char* };
CSHARP_ARRAYS(char, byte)
%apply int INPUT[] { const int32_t* };
%apply int INOUT[] { int32_t* };
%apply float INPUT[] { const float* };
%apply float INOUT[] { float* };
%apply long long INOUT[] { int64_t* };
%apply char INOUT[] { char* };
/* UTF-8 text with its length: the caller passes the encoded bytes and their count. */
%apply char INPUT[] { const char* text };
/* The cache namespace: exact UTF-8 too, NUL-terminated by the caller (Options.cs). */
%apply char INPUT[] { const char* ns };
/* Structured-output texts: exact UTF-8 bytes too, NUL-terminated by the C# layer. */
%apply char INPUT[] { const char* schema_json, const char* gbnf };

/* The low layer is internal to Kvtier.dll: users see only the hand-written Kvtier namespace,
 * whose public members all carry XML documentation (mcs -doc, CS1591 is an error). */
%pragma(csharp) moduleclassmodifiers="internal class"
%typemap(csclassmodifiers) SWIGTYPE, SWIGTYPE *, SWIGTYPE &, SWIGTYPE [] "internal class"

/* The C callbacks (kvt_log_fn, kvt_progress_fn) and their user data as IntPtr: the
 * idiomatic layer passes Marshal.GetFunctionPointerForDelegate of a delegate it keeps
 * alive (Logging.cs, Progress.cs). */
%define KVT_CS_INTPTR(TYPE)
%typemap(ctype) TYPE "void*"
%typemap(imtype) TYPE "global::System.IntPtr"
%typemap(cstype) TYPE "global::System.IntPtr"
%typemap(in) TYPE %{ $1 = ($1_ltype)$input; %}
%typemap(csin) TYPE "$csinput"
%enddef
KVT_CS_INTPTR(kvt_log_fn)
KVT_CS_INTPTR(kvt_progress_fn)
KVT_CS_INTPTR(void* user_data)
