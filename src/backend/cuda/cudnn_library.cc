// CudnnLibrary (see cudnn_library.h): dlopen, dlsym, the version check.
#include "backend/cuda/cudnn_library.h"

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cuda/runtime_library.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

std::string CudnnLibrary::PathFromEnvironment() { return RuntimeLibraryPath(kPathVariable, kDefaultFile); }

std::string CudnnLibrary::VersionString() const {
  return absl::StrCat(version_ / 10000, ".", version_ / 100 % 100, ".", version_ % 100);
}

absl::StatusOr<std::unique_ptr<CudnnLibrary>> CudnnLibrary::Load(const std::string& path) {
  ASSIGN_OR_RETURN(void* handle, OpenRuntimeLibrary(path, "cuDNN", kPathVariable, kDefaultFile));
  CudnnApi api;
  SymbolResolver resolve(handle);
  resolve(api.GetVersion, "cudnnGetVersion");
  resolve(api.GetErrorString, "cudnnGetErrorString");
  resolve(api.GetLastErrorString, "cudnnGetLastErrorString");
  resolve(api.Create, "cudnnCreate");
  resolve(api.Destroy, "cudnnDestroy");
  resolve(api.SetStream, "cudnnSetStream");
  resolve(api.BackendCreateDescriptor, "cudnnBackendCreateDescriptor");
  resolve(api.BackendDestroyDescriptor, "cudnnBackendDestroyDescriptor");
  resolve(api.BackendSetAttribute, "cudnnBackendSetAttribute");
  resolve(api.BackendGetAttribute, "cudnnBackendGetAttribute");
  resolve(api.BackendFinalize, "cudnnBackendFinalize");
  resolve(api.BackendExecute, "cudnnBackendExecute");
  if (const char* missing = resolve.missing(); missing != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("cuDNN (", path, ") has no symbol ", missing, ": not cuDNN ", kMinVersion / 10000, " or later"));
  }
  const size_t version = api.GetVersion();
  if (version < kMinVersion) {
    return absl::FailedPreconditionError(absl::StrCat("cuDNN (", path, ") is version ", version,
                                                      "; the fused attention graph needs ", kMinVersion, " or later"));
  }
  return std::unique_ptr<CudnnLibrary>(new CudnnLibrary(path, api, version));
}

absl::StatusOr<const CudnnLibrary*> CudnnLibrary::Shared() {
  static std::once_flag once;
  static absl::StatusOr<std::unique_ptr<CudnnLibrary>>* loaded = nullptr;  // never destroyed
  std::call_once(once, [] { loaded = new absl::StatusOr<std::unique_ptr<CudnnLibrary>>(Load(PathFromEnvironment())); });
  if (!loaded->ok()) return loaded->status();
  return loaded->value().get();
}

}  // namespace kvtier::cuda
