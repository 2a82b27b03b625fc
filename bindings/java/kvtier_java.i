/* Java typemaps for kvtier.i: token arrays and scalar outs become Java arrays (copied in,
 * copied back after the call), byte buffers become byte[]. */
%include <arrays_java.i>
%include <various.i>
%include <enumtypeunsafe.swg>

/* Keep const char* a String: the char* buffer typemap below would otherwise match it. */
%apply char* { const char* };
%apply int[] { const int32_t*, int32_t* };
%apply long long[] { int64_t* };
%apply char* BYTE { char* };
/* UTF-8 text with its length: a byte[] (exact UTF-8; JNI strings are modified UTF-8). */
%apply (const char *STRING, size_t LENGTH) { (const char* text, int32_t text_len) };
%typemap(argout) const char* ""
/* Structured-output texts: exact UTF-8 too, as byte[] (NUL-terminated by the Java layer). */
%apply char* BYTE { const char* schema_json, const char* gbnf };
%typemap(freearg) const char* { if ($1) JCALL2(ReleaseStringUTFChars, jenv, $input, (const char*)$1); }

/* Load the JNI library once, before the first native call (NativeLoader.java: the file named
 * by -Dkvtier.jni.library, else kvtier_jni from java.library.path, else the copies the
 * self-contained jar carries). */
%pragma(java) jniclasscode=%{
  static {
    NativeLoader.load();
  }
%}
