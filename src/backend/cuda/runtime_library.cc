// Run-time library loading helpers (runtime_library.h).
#include "backend/cuda/runtime_library.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kvtier::cuda {

std::string RuntimeLibraryPath(const char* variable, const char* default_file) {
  const char* path = std::getenv(variable);
  return path != nullptr && path[0] != '\0' ? std::string(path) : std::string(default_file);
}

absl::StatusOr<void*> OpenRuntimeLibrary(const std::string& path, const char* what, const char* variable,
                                         const char* default_file) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": the library path is empty"));
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::NotFoundError(absl::StrCat(what, " (", path, ") cannot be loaded: ",
                                            error != nullptr ? error : "dlopen failed", " (set ", variable,
                                            " or LD_LIBRARY_PATH to where ", default_file, " is)"));
  }
  return handle;
}

void* SymbolResolver::Find(const char* name) const { return dlsym(handle_, name); }

}  // namespace kvtier::cuda
