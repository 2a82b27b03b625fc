// NcclGroup (nccl_group.h).
#include "backend/cuda/nccl_group.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvtier::cuda {
namespace {

absl::Status NcclStatus(const NcclApi& api, ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("NCCL ", what, ": ", api.GetErrorString(result)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(const NcclLibrary& library,
                                                             std::span<const int32_t> devices) {
  if (devices.empty()) return absl::InvalidArgumentError("NCCL group: no device");
  std::vector<int32_t> sorted(devices.begin(), devices.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError("NCCL group: a device is named twice (one rank per GPU)");
  }
  const NcclApi& api = library.api();
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  std::vector<int> ordinals(devices.begin(), devices.end());
  if (absl::Status st = NcclStatus(api, api.CommInitAll(comms.data(), static_cast<int>(comms.size()), ordinals.data()),
                                   "ncclCommInitAll");
      !st.ok()) {
    return st;
  }
  return std::unique_ptr<NcclGroup>(new NcclGroup(api, std::move(comms)));
}

NcclGroup::~NcclGroup() {
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) api_.CommDestroy(comm);
  }
}

absl::Status NcclGroup::AllReduceSum(std::span<void* const> buffers, int64_t count, ncclDataType_t type,
                                     std::span<const cudaStream_t> streams) {
  if (buffers.size() != comms_.size() || streams.size() != comms_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL all-reduce: ", buffers.size(), " buffers and ",
                                                   streams.size(), " streams for ", comms_.size(), " ranks"));
  }
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("NCCL all-reduce: negative count ", count));
  if (absl::Status st = NcclStatus(api_, api_.GroupStart(), "ncclGroupStart"); !st.ok()) return st;
  absl::Status enqueued = absl::OkStatus();
  for (size_t r = 0; r < comms_.size() && enqueued.ok(); ++r) {
    enqueued = NcclStatus(api_,
                          api_.AllReduce(buffers[r], buffers[r], static_cast<size_t>(count), type, ncclSum, comms_[r],
                                         streams[r]),
                          "ncclAllReduce");
  }
  // The group is closed whatever happened inside it, or NCCL's group state stays open.
  absl::Status ended = NcclStatus(api_, api_.GroupEnd(), "ncclGroupEnd");
  return enqueued.ok() ? ended : enqueued;
}

absl::Status NcclGroup::AsyncError() const {
  for (size_t r = 0; r < comms_.size(); ++r) {
    ncclResult_t async = ncclSuccess;
    if (absl::Status st = NcclStatus(api_, api_.CommGetAsyncError(comms_[r], &async), "ncclCommGetAsyncError");
        !st.ok()) {
      return st;
    }
    if (async != ncclSuccess) {
      return absl::InternalError(absl::StrCat("NCCL rank ", r, ": ", api_.GetErrorString(async)));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
