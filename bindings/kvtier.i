/* kvtier.i — the SWIG interface over the public C header, shared by every language.
 * SWIG reads include/kvtier/kvtier.h itself, so functions added to the header are wrapped
 * without editing this file. The low layer it generates is one function per C function;
 * the hand-written layer of each language (bindings/<lang>/) makes it idiomatic.
 *
 * Parameter conventions of the header, mapped the same way in every language by the
 * per-language typemaps included below (bindings/<lang>/kvtier_<lang>.i):
 *   const int32_t*  token array in    -> []int32 / int[] / int[]
 *   int32_t*        array or scalar out (a length-1 array for a scalar)
 *   int64_t*        scalar out         -> []int64 / long[] / long[]
 *   char*           byte buffer out    -> []byte / byte[] / byte[]
 *   kvt_<x>**       handle out         -> a box made and read with the functions below
 *   (const char* text, int32_t text_len)  UTF-8 text in -> string / byte[] / byte[]
 *   enums           plain int constants (the idiomatic layers turn statuses into errors)
 */
%module kvtier

%{
#include <string.h>
#include "kvtier/kvtier.h"
%}

%include <stdint.i>
%include <cpointer.i>

#if defined(SWIGGO)
%include "kvtier_go.i"
#elif defined(SWIGJAVA)
%include "kvtier_java.i"
#elif defined(SWIGCSHARP)
%include "kvtier_csharp.i"
#endif

/* Boxes for the handle out-parameters: new_X(), X_value(box), delete_X(box). */
%pointer_functions(kvt_model*, kvt_model_box);
%pointer_functions(kvt_options*, kvt_options_box);
%pointer_functions(kvt_request*, kvt_request_box);
%pointer_functions(kvt_context*, kvt_context_box);
%pointer_functions(kvt_events*, kvt_events_box);

/* kvt_events_text returns a pointer into the events object; bindings copy it instead. */
%ignore kvt_events_text;

/* Calls taking C callbacks: Go reaches them through cgo (bindings/go/bridge.go) and Java
 * through JNI glue (bindings/java/kvtier_java.i), both of which turn the language's own
 * functions into the C function pointers; C# passes delegates as function pointers. */
#if defined(SWIGGO) || defined(SWIGJAVA)
%ignore kvt_set_log_callback;
%ignore kvt_model_load_with_progress;
%ignore kvt_options_set_progress_callback;
#endif

%include "kvtier/kvtier.h"

%inline %{
/* kvt_events_text, copied: event i's text into buf (NUL-terminated when buf_len > 0).
 * Returns the text's full length in bytes, or -status when kvt_events_text fails. */
int32_t kvt_events_text_copy(const kvt_events* events, int32_t i, char* buf, int32_t buf_len) {
  const char* text = NULL;
  int32_t len = 0;
  kvt_status status = kvt_events_text(events, i, &text, &len);
  if (status != KVT_OK) return -(int32_t)status;
  if (buf_len > 0) {
    int32_t n = len < buf_len - 1 ? len : buf_len - 1;
    if (n > 0) memcpy(buf, text, (size_t)n);
    buf[n] = '\0';
  }
  return len;
}
%}
