// NcclLibrary (see nccl_library.h): dlopen, dlsym, the version check.
#include "backend/cuda/nccl_library.h"

#include <cstdlib>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/cuda/runtime_library.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

std::string NcclLibrary::PathFromEnvironment() { return RuntimeLibraryPath(kPathVariable, kDefaultFile); }

std::string NcclLibrary::VersionString() const {
  return absl::StrCat(version_ / 10000, ".", version_ / 100 % 100, ".", version_ % 100);
}

absl::StatusOr<std::unique_ptr<NcclLibrary>> NcclLibrary::Load(const std::string& path) {
  // Before NCCL reads its environment (at its first communicator); 0: don't overwrite.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  ASSIGN_OR_RETURN(void* handle, OpenRuntimeLibrary(path, "NCCL", kPathVariable, kDefaultFile));
  NcclApi api;
  SymbolResolver resolve(handle);
  resolve(api.GetVersion, "ncclGetVersion");
  resolve(api.GetErrorString, "ncclGetErrorString");
  resolve(api.CommInitAll, "ncclCommInitAll");
  resolve(api.CommDestroy, "ncclCommDestroy");
  resolve(api.CommGetAsyncError, "ncclCommGetAsyncError");
  resolve(api.AllReduce, "ncclAllReduce");
  resolve(api.GroupStart, "ncclGroupStart");
  resolve(api.GroupEnd, "ncclGroupEnd");
  if (const char* missing = resolve.missing(); missing != nullptr) {
    return absl::UnimplementedError(absl::StrCat("NCCL (", path, ") has no symbol ", missing, ": not NCCL ",
                                                 kMinVersion / 10000, ".", kMinVersion / 100 % 100, " or later"));
  }
  int version = 0;
  if (ncclResult_t r = api.GetVersion(&version); r != ncclSuccess) {
    return absl::InternalError(absl::StrCat("NCCL (", path, "): ncclGetVersion failed: ", api.GetErrorString(r)));
  }
  if (version < kMinVersion) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL (", path, ") is version ", version,
                                                      "; tensor parallelism needs ", kMinVersion, " or later"));
  }
  return std::unique_ptr<NcclLibrary>(new NcclLibrary(path, api, version));
}

absl::StatusOr<const NcclLibrary*> NcclLibrary::Shared() {
  static std::once_flag once;
  static absl::StatusOr<std::unique_ptr<NcclLibrary>>* loaded = nullptr;  // never destroyed
  std::call_once(once, [] { loaded = new absl::StatusOr<std::unique_ptr<NcclLibrary>>(Load(PathFromEnvironment())); });
  if (!loaded->ok()) return loaded->status();
  return loaded->value().get();
}

}  // namespace kvtier::cuda
