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
%typemap(freearg) const char* { if ($1) JCALL2(ReleaseStringUTFChars, jenv, $input, (const char*)$1); }

/* Load the JNI library once, from the system property kvtier.jni.library (a file path)
 * when set, else "kvtier_jni" from java.library.path. */
%pragma(java) jniclasscode=%{
  static {
    String path = System.getProperty("kvtier.jni.library");
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else {
      System.loadLibrary("kvtier_jni");
    }
  }
%}
