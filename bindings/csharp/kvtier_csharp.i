/* C# typemaps for kvtier.i: token arrays and scalar outs become pinned C# arrays,
 * byte buffers become byte[]. */
%include <arrays_csharp.i>
%include <enumsimple.swg>

/* Keep const char* a string: the char* buffer typemap below would otherwise match it. */
%apply char* { const char* };
CSHARP_ARRAYS(char, byte)
%apply int INPUT[] { const int32_t* };
%apply int INOUT[] { int32_t* };
%apply long long INOUT[] { int64_t* };
%apply char INOUT[] { char* };
/* UTF-8 text with its length: the caller passes the encoded bytes and their count. */
%apply char INPUT[] { const char* text };
/* Structured-output texts: exact UTF-8 bytes too, NUL-terminated by the C# layer. */
%apply char INPUT[] { const char* schema_json, const char* gbnf };

/* The low layer is internal to Kvtier.dll: users see only the hand-written Kvtier namespace,
 * whose public members all carry XML documentation (mcs -doc, CS1591 is an error). */
%pragma(csharp) moduleclassmodifiers="internal class"
%typemap(csclassmodifiers) SWIGTYPE, SWIGTYPE *, SWIGTYPE &, SWIGTYPE [] "internal class"
