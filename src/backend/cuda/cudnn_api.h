// CudnnApi: the slice of cuDNN 9's C API kvtier calls (handle, stream, version, errors and
// the backend graph API), as a table of function pointers, so that the library calls cuDNN
// without linking it (CudnnLibrary fills the table with dlsym) and a program that does link
// it (bench/micro/cudnn_sdpa.cu) fills the same table with its own symbols. cudnn.h is
// included for its types only. Plain value; the functions are cuDNN's, thread-safe as cuDNN
// says (one handle per thread at a time).
#ifndef KVTIER_BACKEND_CUDA_CUDNN_API_H_
#define KVTIER_BACKEND_CUDA_CUDNN_API_H_

#include <cudnn.h>

#include <cstddef>

namespace kvtier::cuda {

struct CudnnApi {
  decltype(&cudnnGetVersion) GetVersion = nullptr;
  decltype(&cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&cudnnGetLastErrorString) GetLastErrorString = nullptr;
  decltype(&cudnnCreate) Create = nullptr;
  decltype(&cudnnDestroy) Destroy = nullptr;
  decltype(&cudnnSetStream) SetStream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) BackendCreateDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) BackendDestroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) BackendSetAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) BackendGetAttribute = nullptr;
  decltype(&cudnnBackendFinalize) BackendFinalize = nullptr;
  decltype(&cudnnBackendExecute) BackendExecute = nullptr;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_CUDNN_API_H_
