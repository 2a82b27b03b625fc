// The contract between the core library and the optional CUDA backend module
// (libkvtier_cuda.so), which is loaded with dlopen only where it exists, so the core has no
// hard dependency on the CUDA driver, runtime or cuBLAS.
#ifndef KVTIER_BACKEND_CUDA_MODULE_H_
#define KVTIER_BACKEND_CUDA_MODULE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "common/log.h"

namespace kvtier {

// The module exports this symbol (C linkage, default visibility) with signature
// CreateCudaBackendFn. It returns Unavailable when no usable GPU/driver is present.
inline constexpr char kCudaModuleSymbol[] = "kvtier_cuda_create_backend";
// Module file name, looked up next to the loaded libkvtier, then on the library path.
inline constexpr char kCudaModuleFile[] = "libkvtier_cuda.so";
// Bumped whenever Backend, Checkpoint or BackendOptions change layout.
inline constexpr int kCudaModuleAbiVersion = 7;

using CreateCudaBackendFn = absl::StatusOr<std::unique_ptr<Backend>> (*)(
    int abi_version, const Checkpoint& checkpoint, const BackendOptions& options);

// Also exported, with signature CudaForwardLogFn: called once after loading, it sends the
// module's log (its own copy of common/log.h) to the loading library's LogEnabled and
// LogMessage.
inline constexpr char kCudaModuleLogSymbol[] = "kvtier_cuda_forward_log";
using CudaForwardLogFn = void (*)(LogEnabledFn enabled, LogMessageFn message);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_CUDA_MODULE_H_
