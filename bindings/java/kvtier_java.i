/* Java typemaps for kvtier.i: token arrays and scalar outs become Java arrays (copied in,
 * copied back after the call), byte buffers become byte[]. */
%include <arrays_java.i>
%include <various.i>
%include <enumtypeunsafe.swg>

/* Keep const char* a String: the char* buffer typemap below would otherwise match it. */
%apply char* { const char* };
%apply int[] { const int32_t*, int32_t* };
%apply float[] { const float*, float* };
%apply long long[] { int64_t* };
%apply char* BYTE { char* };
/* UTF-8 text with its length: a byte[] (exact UTF-8; JNI strings are modified UTF-8). */
%apply (const char *STRING, size_t LENGTH) { (const char* text, int32_t text_len) };
/* The cache namespace: exact UTF-8 too, as a NUL-terminated byte[] (Request.java). */
%apply char* BYTE { const char* ns };
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

/* ---- Callbacks: the library calls C function pointers; these trampolines call Java. */

/* A JNIEnv* parameter named jni_env is the calling thread's (not a Java argument). */
%typemap(in, numinputs=0) JNIEnv* jni_env %{ $1 = jenv; %}

%{
#include <string.h>

/* Log messages go to the static dev.kvtier.Logging.dispatch(int, byte[]). The class and
 * method are looked up once, from a Java thread (the library's I/O threads that also log
 * could only see the system class loader). */
static JavaVM* kvt_java_vm = NULL;
static jclass kvt_java_logging = NULL;  /* global reference */
static jmethodID kvt_java_dispatch = NULL;

static void kvt_java_log(void* user_data, int32_t level, const char* message) {
  JNIEnv* env = NULL;
  int attached = 0;
  jsize n = (jsize)strlen(message);
  jbyteArray bytes;
  (void)user_data;
  if ((*kvt_java_vm)->GetEnv(kvt_java_vm, (void**)&env, JNI_VERSION_1_8) == JNI_EDETACHED) {
    /* A library thread: attached for the call (as a daemon: it never holds the JVM up). */
    if ((*kvt_java_vm)->AttachCurrentThreadAsDaemon(kvt_java_vm, (void**)&env, NULL) != JNI_OK) return;
    attached = 1;
  }
  bytes = (*env)->NewByteArray(env, n);
  if (bytes != NULL) {
    (*env)->SetByteArrayRegion(env, bytes, 0, n, (const jbyte*)message);
    (*env)->CallStaticVoidMethod(env, kvt_java_logging, kvt_java_dispatch, (jint)level, bytes);
    (*env)->DeleteLocalRef(env, bytes);
  }
  if ((*env)->ExceptionCheck(env)) (*env)->ExceptionClear(env); /* a throwing handler loses its record */
  if (attached) (*kvt_java_vm)->DetachCurrentThread(kvt_java_vm);
}

/* A progress listener (dev.kvtier.ProgressListener) for one call, on the calling thread.
 * What the listener throws cancels the call and is thrown again when the call returns. */
typedef struct kvt_java_progress_call {
  JNIEnv* env;
  jobject listener;
  jmethodID method;
  jthrowable thrown; /* global reference, or NULL */
} kvt_java_progress_call;

static int32_t kvt_java_progress(void* user_data, const char* stage, int64_t done, int64_t total) {
  kvt_java_progress_call* call = (kvt_java_progress_call*)user_data;
  JNIEnv* env = call->env;
  jstring name;
  jboolean go_on;
  if (call->thrown != NULL) return 1;
  name = (*env)->NewStringUTF(env, stage);
  if (name == NULL) return 1;
  go_on = (*env)->CallBooleanMethod(env, call->listener, call->method, name, (jlong)done, (jlong)total);
  (*env)->DeleteLocalRef(env, name);
  if ((*env)->ExceptionCheck(env)) {
    jthrowable thrown = (*env)->ExceptionOccurred(env);
    (*env)->ExceptionClear(env);
    call->thrown = (jthrowable)(*env)->NewGlobalRef(env, thrown);
    (*env)->DeleteLocalRef(env, thrown);
    return 1;
  }
  return go_on ? 0 : 1;
}

static int kvt_java_progress_begin(JNIEnv* env, jobject listener, kvt_java_progress_call* call) {
  jclass type;
  call->env = env;
  call->listener = listener;
  call->thrown = NULL;
  type = (*env)->GetObjectClass(env, listener);
  call->method = (*env)->GetMethodID(env, type, "onProgress", "(Ljava/lang/String;JJ)Z");
  (*env)->DeleteLocalRef(env, type);
  return call->method != NULL; /* else NoSuchMethodError is pending */
}

static void kvt_java_progress_end(kvt_java_progress_call* call) {
  if (call->thrown != NULL) {
    (*call->env)->Throw(call->env, call->thrown);
    (*call->env)->DeleteGlobalRef(call->env, call->thrown);
  }
}
%}

%inline %{
/* kvt_set_log_callback to dev.kvtier.Logging.dispatch (on != 0) or off. */
int32_t kvt_java_set_log_callback(JNIEnv* jni_env, int32_t on, int32_t min_level) {
  if (on && kvt_java_logging == NULL) {
    jclass local = (*jni_env)->FindClass(jni_env, "dev/kvtier/Logging");
    if (local == NULL) return KVT_ERR_INTERNAL;
    kvt_java_dispatch = (*jni_env)->GetStaticMethodID(jni_env, local, "dispatch", "(I[B)V");
    if (kvt_java_dispatch == NULL || (*jni_env)->GetJavaVM(jni_env, &kvt_java_vm) != 0) {
      (*jni_env)->DeleteLocalRef(jni_env, local);
      return KVT_ERR_INTERNAL;
    }
    kvt_java_logging = (jclass)(*jni_env)->NewGlobalRef(jni_env, local);
    (*jni_env)->DeleteLocalRef(jni_env, local);
  }
  return kvt_set_log_callback(on ? kvt_java_log : NULL, NULL, min_level);
}

/* kvt_model_load_with_progress reporting to a dev.kvtier.ProgressListener. */
int32_t kvt_java_model_load_with_progress(JNIEnv* jni_env, const char* directory, jobject listener,
                                          kvt_model** out, char* errbuf, int32_t errbuf_len) {
  kvt_java_progress_call call;
  kvt_status status;
  if (!kvt_java_progress_begin(jni_env, listener, &call)) return KVT_ERR_INVALID_ARGUMENT;
  status = kvt_model_load_with_progress(directory, kvt_java_progress, &call, out, errbuf, errbuf_len);
  kvt_java_progress_end(&call);
  return status;
}

/* kvt_context_create with the options' progress callback set to a listener for this call. */
int32_t kvt_java_context_create_with_progress(JNIEnv* jni_env, kvt_model* model, kvt_options* options,
                                              jobject listener, kvt_context** out, char* errbuf,
                                              int32_t errbuf_len) {
  kvt_java_progress_call call;
  kvt_status status;
  if (!kvt_java_progress_begin(jni_env, listener, &call)) return KVT_ERR_INVALID_ARGUMENT;
  status = kvt_options_set_progress_callback(options, kvt_java_progress, &call);
  if (status == KVT_OK) status = kvt_context_create(model, options, out, errbuf, errbuf_len);
  kvt_options_set_progress_callback(options, NULL, NULL);
  kvt_java_progress_end(&call);
  return status;
}
%}
