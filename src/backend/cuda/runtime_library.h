// What the libraries kvtier loads at run time (cuDNN, NCCL) share: the path from an
// environment variable, dlopen with an error that says where to point it, and dlsym of a
// table of functions that stops at the first missing symbol. Stateless helpers.
#ifndef KVTIER_BACKEND_CUDA_RUNTIME_LIBRARY_H_
#define KVTIER_BACKEND_CUDA_RUNTIME_LIBRARY_H_

#include <string>
#include <type_traits>

#include "absl/status/statusor.h"

namespace kvtier::cuda {

// `variable`'s value when set and not empty, else `default_file`.
std::string RuntimeLibraryPath(const char* variable, const char* default_file);

// dlopen(path, RTLD_NOW | RTLD_LOCAL). InvalidArgument for an empty path; NotFound with
// dlerror's text and the advice to set `variable` or LD_LIBRARY_PATH to where `default_file`
// is. `what` names the library in messages ("cuDNN").
absl::StatusOr<void*> OpenRuntimeLibrary(const std::string& path, const char* what, const char* variable,
                                         const char* default_file);

// Fills function pointers by name from a dlopen handle; after the first symbol it cannot
// find it resolves nothing more, and missing() names that symbol.
class SymbolResolver {
 public:
  explicit SymbolResolver(void* handle) : handle_(handle) {}

  template <typename Fn>
  void operator()(Fn& fn, const char* name) {
    static_assert(std::is_pointer_v<Fn>);
    if (missing_ != nullptr) return;
    void* symbol = Find(name);
    if (symbol == nullptr) missing_ = name;
    fn = reinterpret_cast<Fn>(symbol);
  }
  const char* missing() const { return missing_; }

 private:
  void* Find(const char* name) const;

  void* const handle_;
  const char* missing_ = nullptr;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_RUNTIME_LIBRARY_H_
