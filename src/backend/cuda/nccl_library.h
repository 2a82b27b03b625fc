// NcclLibrary: NCCL 2 (libnccl.so.2) loaded with dlopen at run time, so kvtier links no NCCL
// and runs where there is none (tensor_parallel 1 never needs it); what kvtier calls is
// resolved with dlsym into an NcclApi. When it cannot be used the reason says which: not
// found, too old, or a symbol missing. Immutable after Load; thread-safe.
//
// NVLink multicast (NVLS) stays off: loading sets NCCL_NVLS_ENABLE=0 unless the process
// already sets it, because multicast objects outlive a crashed process and can take a shared
// host's GPUs out of service.
#ifndef KVTIER_BACKEND_CUDA_NCCL_LIBRARY_H_
#define KVTIER_BACKEND_CUDA_NCCL_LIBRARY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backend/cuda/nccl_api.h"

namespace kvtier::cuda {

class NcclLibrary {
 public:
  // The file dlopen is given when no path is: found on the loader's search path
  // (LD_LIBRARY_PATH, the ld.so cache), as PyTorch's wheel's copy (nvidia/nccl/lib) is when
  // its directory is on LD_LIBRARY_PATH.
  static constexpr char kDefaultFile[] = "libnccl.so.2";
  // bf16 all-reduce exists from NCCL 2.10 on; 2.18 is the oldest kvtier is tested against
  // (ncclGetVersion's code: major * 10000 + minor * 100 + patch).
  static constexpr int kMinVersion = 21800;
  // The environment variable that names the library's path, when set and not empty.
  static constexpr char kPathVariable[] = "KVTIER_NCCL_LIBRARY";

  // KVTIER_NCCL_LIBRARY when set, else kDefaultFile. Read here alone: like LD_LIBRARY_PATH
  // it says where a run-time dependency lives, not how kvtier computes.
  static std::string PathFromEnvironment();

  // dlopen(path) and dlsym of every NcclApi entry. NotFound when the file cannot be loaded
  // (dlerror's text), FailedPrecondition when its version is below kMinVersion,
  // Unimplemented naming the first symbol it lacks; InvalidArgument for an empty path.
  static absl::StatusOr<std::unique_ptr<NcclLibrary>> Load(const std::string& path);

  // The library of PathFromEnvironment(), loaded on the first call and kept for the life of
  // the process; every later call returns the same library or the same error.
  static absl::StatusOr<const NcclLibrary*> Shared();

  // The library stays mapped: NCCL keeps process-wide state (its proxy threads, its
  // plugins) that a dlclose under a live communicator would pull away.
  ~NcclLibrary() = default;
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  const NcclApi& api() const { return api_; }
  // ncclGetVersion's code, e.g. 22809 for 2.28.9.
  int version() const { return version_; }
  std::string VersionString() const;
  const std::string& path() const { return path_; }

 private:
  NcclLibrary(std::string path, NcclApi api, int version) : path_(std::move(path)), api_(api), version_(version) {}

  const std::string path_;
  const NcclApi api_;
  const int version_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_NCCL_LIBRARY_H_
