/* Fixture of bindings_parity_detects_gap: the public header plus one function no binding
 * calls, which the parity check must report. */
#include "../../include/kvtier/kvtier.h"
KVT_API kvt_status kvt_unbound_function(kvt_context* context);
