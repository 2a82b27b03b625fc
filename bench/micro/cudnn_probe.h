// What the cuDNN probes (cudnn_sdpa.cu, cudnn_sdpa_fp8.cu) share: the library's table of cuDNN
// functions filled with the ones the probe links (it calls the library's graph builder,
// src/backend/cuda/cudnn_graph.h), and cuDNN's last error message.
#ifndef KVTIER_BENCH_MICRO_CUDNN_PROBE_H_
#define KVTIER_BENCH_MICRO_CUDNN_PROBE_H_

#include <cudnn.h>

#include <string>

#include "backend/cuda/cudnn_api.h"

namespace kvtier::probe {

inline const kvtier::cuda::CudnnApi& Api() {
  static const kvtier::cuda::CudnnApi api = [] {
    kvtier::cuda::CudnnApi a;
    a.GetVersion = &cudnnGetVersion;
    a.GetErrorString = &cudnnGetErrorString;
    a.GetLastErrorString = &cudnnGetLastErrorString;
    a.Create = &cudnnCreate;
    a.Destroy = &cudnnDestroy;
    a.SetStream = &cudnnSetStream;
    a.BackendCreateDescriptor = &cudnnBackendCreateDescriptor;
    a.BackendDestroyDescriptor = &cudnnBackendDestroyDescriptor;
    a.BackendSetAttribute = &cudnnBackendSetAttribute;
    a.BackendGetAttribute = &cudnnBackendGetAttribute;
    a.BackendFinalize = &cudnnBackendFinalize;
    a.BackendExecute = &cudnnBackendExecute;
    return a;
  }();
  return api;
}

inline std::string LastCudnnError() {
  char message[2048] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  return message;
}

}  // namespace kvtier::probe

#endif  // KVTIER_BENCH_MICRO_CUDNN_PROBE_H_
