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
 *   enums           plain int constants (the idiomatic layers turn statuses into errors)
 */
%module kvtier

%{
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

%include "kvtier/kvtier.h"
