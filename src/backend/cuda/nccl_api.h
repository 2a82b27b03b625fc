// NcclApi: the slice of NCCL's C API the tensor-parallel all-reduce calls (version, errors,
// communicators over the GPUs of one process, all-reduce, group calls), as a table of
// function pointers, so that kvtier calls NCCL without linking it (NcclLibrary fills the
// table with dlsym). nccl.h is included for its types only. Plain value; the functions are
// NCCL's, thread-safe as NCCL says.
#ifndef KVTIER_BACKEND_CUDA_NCCL_API_H_
#define KVTIER_BACKEND_CUDA_NCCL_API_H_

#include <nccl.h>

namespace kvtier::cuda {

struct NcclApi {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclCommInitAll) CommInitAll = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_NCCL_API_H_
