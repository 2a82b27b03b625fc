// CudnnLibrary (see cudnn_library.h): dlopen, dlsym, the version check.
#include "backend/cuda/cudnn_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvtier::cuda {

std::string CudnnLibrary::PathFromEnvironment() {
  const char* path = std::getenv(kPathVariable);
  return path != nullptr && path[0] != '\0' ? std::string(path) : std::string(kDefaultFile);
}

std::string CudnnLibrary::VersionString() const {
  return absl::StrCat(version_ / 10000, ".", version_ / 100 % 100, ".", version_ % 100);
}

absl::StatusOr<std::unique_ptr<CudnnLibrary>> CudnnLibrary::Load(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("cuDNN: the library path is empty");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::NotFoundError(absl::StrCat("cuDNN (", path, ") cannot be loaded: ",
                                            error != nullptr ? error : "dlopen failed",
                                            " (set KVTIER_CUDNN_LIBRARY or LD_LIBRARY_PATH to where ",
                                            kDefaultFile, " is)"));
  }
  CudnnApi api;
  const char* missing = nullptr;
  auto resolve = [&](auto& fn, const char* name) {
    if (missing != nullptr) return;
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr) missing = name;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
  };
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
  if (missing != nullptr) {
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
