// The CUDA diagnostics environment variables (README.md, "Diagnostics") as context options.
// The library never reads the environment; `kvtier run` and `kvtier bench` read it here and
// pass the switches on through the C API, so scripts that set the variables keep working.
#ifndef KVTIER_TOOLS_KVTIER_CUDA_ENV_H_
#define KVTIER_TOOLS_KVTIER_CUDA_ENV_H_

#include "kvtier/kvtier.h"

namespace kvtier::cli {

// For each variable that is set: KVTIER_CUDA_GRAPHS, KVTIER_CUDA_FAST_ATTENTION,
// KVTIER_CUDA_PDL, KVTIER_CUDA_PDL_EARLY and KVTIER_CUDA_FP8_ACTIVATIONS set their cuda_* key
// to 0 when their value
// starts with '0', else 1; KVTIER_CUDA_GEMV_PREFETCH sets cuda_gemv_prefetch to its number
// rounded down to 2, 4 or 8 (below 2: 2); KVTIER_CUDA_SKINNY sets cuda_skinny_gemm to its
// number clamped to 0..3; KVTIER_CUDA_PREFILL_ATTENTION=own|cudnn|cudnn-every-chunk sets
// cuda_prefill_cudnn to 0, 1 or 2 (another value fails). Returns the first failing setter's status
// (message in kvt_options_errmsg), else KVT_OK.
kvt_status SetCudaOptionsFromEnvironment(kvt_options* options);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_CUDA_ENV_H_
