// The shared library's own translation unit: everything it exports (kvt_* only, see
// kvtier.map) comes from kvtier_core, linked whole.
#include "kvtier/kvtier.h"
