#include "backend/cuda/resident_ctas.h"

#include <cuda_runtime.h>

#include <mutex>
#include <tuple>

#include "absl/container/flat_hash_map.h"

namespace kvtier::cuda {

int64_t ResidentCtas(const void* kernel, int threads, size_t dynamic_shared) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  using Key = std::tuple<int, const void*, int, size_t>;
  static std::mutex mu;
  static absl::flat_hash_map<Key, int64_t>* const known = new absl::flat_hash_map<Key, int64_t>();
  const Key key{device, kernel, threads, dynamic_shared};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known->find(key); it != known->end()) return it->second;
  int sms = 0, per_sm = 0;
  int64_t ctas = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_shared) == cudaSuccess) {
    ctas = static_cast<int64_t>(sms) * per_sm;
  } else {
    cudaGetLastError();
  }
  known->emplace(key, ctas);
  return ctas;
}

}  // namespace kvtier::cuda
