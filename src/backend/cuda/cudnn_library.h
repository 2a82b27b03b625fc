// CudnnLibrary: cuDNN 9 (libcudnn.so.9) loaded with dlopen at run time, so kvtier links no
// cuDNN and runs where there is none; what kvtier calls is resolved with dlsym into a
// CudnnApi. When it cannot be used the reason says which: not found, too old, or a symbol
// missing. Immutable after Load; thread-safe.
#ifndef KVTIER_BACKEND_CUDA_CUDNN_LIBRARY_H_
#define KVTIER_BACKEND_CUDA_CUDNN_LIBRARY_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backend/cuda/cudnn_api.h"

namespace kvtier::cuda {

class CudnnLibrary {
 public:
  // The file dlopen is given when no path is: found on the loader's search path
  // (LD_LIBRARY_PATH, the ld.so cache), as PyTorch's wheel's copy is when its lib directory
  // is on LD_LIBRARY_PATH.
  static constexpr char kDefaultFile[] = "libcudnn.so.9";
  // The fused-attention graph kvtier builds (cudnn_graph.h) exists from cuDNN 9.0 on.
  static constexpr size_t kMinVersion = 90000;
  // The environment variable that names the library's path, when set and not empty.
  static constexpr char kPathVariable[] = "KVTIER_CUDNN_LIBRARY";

  // KVTIER_CUDNN_LIBRARY when set, else kDefaultFile. Read here alone: like
  // LD_LIBRARY_PATH it says where a run-time dependency lives, not how kvtier computes.
  static std::string PathFromEnvironment();

  // dlopen(path) and dlsym of every CudnnApi entry. NotFound when the file cannot be
  // loaded (dlerror's text), FailedPrecondition when its version is below kMinVersion,
  // Unimplemented naming the first symbol it lacks; InvalidArgument for an empty path.
  static absl::StatusOr<std::unique_ptr<CudnnLibrary>> Load(const std::string& path);

  // The library of PathFromEnvironment(), loaded on the first call and kept for the life of
  // the process (cuDNN's handles may outlive any one backend); every later call returns the
  // same library or the same error.
  static absl::StatusOr<const CudnnLibrary*> Shared();

  // The library stays mapped: cuDNN keeps process-wide state (its engines' modules) that a
  // dlclose under a live handle would pull away; a second Load of the same file is cheap.
  ~CudnnLibrary() = default;
  CudnnLibrary(const CudnnLibrary&) = delete;
  CudnnLibrary& operator=(const CudnnLibrary&) = delete;

  const CudnnApi& api() const { return api_; }
  // cudnnGetVersion(): major * 10000 + minor * 100 + patch (cuDNN 9).
  size_t version() const { return version_; }
  // "9.19.0".
  std::string VersionString() const;
  const std::string& path() const { return path_; }

 private:
  CudnnLibrary(std::string path, CudnnApi api, size_t version)
      : path_(std::move(path)), api_(api), version_(version) {}

  const std::string path_;
  const CudnnApi api_;
  const size_t version_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_CUDNN_LIBRARY_H_
