// NcclGroup: one NCCL communicator per GPU of a tensor-parallel context, made together in
// one process (ncclCommInitAll: no unique id to exchange), and the all-reduce (sum) of the
// ranks' buffers, enqueued for every rank by one thread inside one NCCL group call so that
// a single thread can drive all the GPUs without deadlocking on the collective.
// Not thread-safe: one thread at a time.
#ifndef KVTIER_BACKEND_CUDA_NCCL_GROUP_H_
#define KVTIER_BACKEND_CUDA_NCCL_GROUP_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/cuda/nccl_library.h"

namespace kvtier::cuda {

class NcclGroup {
 public:
  // Communicators over `devices` (CUDA ordinals, rank r on devices[r]). InvalidArgument for
  // no device or a device named twice; Internal with NCCL's message when NCCL refuses.
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Create(const NcclLibrary& library,
                                                           std::span<const int32_t> devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int32_t size() const { return static_cast<int32_t>(comms_.size()); }

  // buffers[r] (on devices[r], `count` elements of `type`) becomes the sum over the ranks,
  // in place, ordered on streams[r]. Returns once every rank's part is enqueued.
  absl::Status AllReduceSum(std::span<void* const> buffers, int64_t count, ncclDataType_t type,
                            std::span<const cudaStream_t> streams);

  // An error a communicator met while running (ncclCommGetAsyncError), or Ok.
  absl::Status AsyncError() const;

 private:
  NcclGroup(const NcclApi& api, std::vector<ncclComm_t> comms) : api_(api), comms_(std::move(comms)) {}

  const NcclApi& api_;
  const std::vector<ncclComm_t> comms_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_NCCL_GROUP_H_
