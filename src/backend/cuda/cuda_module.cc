// The entry point of libkvtier_cuda.so, looked up by the core with dlsym (cuda_module.h).
#include <memory>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda_module.h"
#include "common/log.h"
#include "model/checkpoint.h"

extern "C" __attribute__((visibility("default")))
absl::StatusOr<std::unique_ptr<kvtier::Backend>> kvtier_cuda_create_backend(
    int abi_version, const kvtier::Checkpoint& checkpoint, const kvtier::BackendOptions& options) {
  if (abi_version != kvtier::kCudaModuleAbiVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("libkvtier_cuda.so was built for module ABI ", kvtier::kCudaModuleAbiVersion,
                     ", the core asked for ", abi_version));
  }
  auto backend = kvtier::CudaBackend::Create(checkpoint, options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<kvtier::Backend>(std::move(backend).value());
}

// The module's own copy of the core's log (common/log.h) sends everything to the loading
// library's sink.
extern "C" __attribute__((visibility("default"))) void kvtier_cuda_forward_log(kvtier::LogEnabledFn enabled,
                                                                              kvtier::LogMessageFn message) {
  kvtier::ForwardLog(enabled, message);
}

// Checked at compile time: the export matches the contract's signature.
static_assert(std::is_same_v<decltype(&kvtier_cuda_create_backend), kvtier::CreateCudaBackendFn>);
static_assert(std::is_same_v<decltype(&kvtier_cuda_forward_log), kvtier::CudaForwardLogFn>);
