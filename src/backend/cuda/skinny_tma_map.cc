#include "backend/cuda/skinny_tma_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/skinny_gemm.h"

namespace kvtier::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

// What a map encodes: the same base and shape give the same map whatever the memory holds.
struct MapKey {
  const void* base;
  int64_t rows, k;
  int box_rows, l2_promotion;
  bool two_byte_elements;
  bool operator==(const MapKey& o) const {
    return base == o.base && rows == o.rows && k == o.k && box_rows == o.box_rows && l2_promotion == o.l2_promotion &&
           two_byte_elements == o.two_byte_elements;
  }
};
struct MapKeyHash {
  size_t operator()(const MapKey& key) const {
    size_t h = std::hash<const void*>()(key.base);
    const int64_t fields[] = {key.rows, key.k, key.box_rows, key.l2_promotion, key.two_byte_elements};
    for (int64_t v : fields) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};

}  // namespace

bool SkinnyTmaAvailable() { return Encoder() != nullptr; }

namespace {
std::mutex tuning_mu;
SkinnyTmaTuning tuning;  // guarded by tuning_mu
std::atomic<int64_t*> trace{nullptr};  // read at every launch: no lock
}  // namespace

void SetSkinnyTrace(int64_t* device_buffer) { trace.store(device_buffer, std::memory_order_relaxed); }

int64_t* CurrentSkinnyTrace() { return trace.load(std::memory_order_relaxed); }

void SetSkinnyTmaTuning(const SkinnyTmaTuning& next) {
  std::lock_guard<std::mutex> lock(tuning_mu);
  tuning = next;
}

SkinnyTmaTuning CurrentSkinnyTmaTuning() {
  std::lock_guard<std::mutex> lock(tuning_mu);
  return tuning;
}

bool EncodeSkinnyTmaMap(CUtensorMap* map, const void* base, bool two_byte_elements, int64_t rows, int64_t k,
                        int box_rows, int l2_promotion) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr || rows < 1 || k < 1 || box_rows < 1 || box_rows > 256) return false;
  // Eager decode steps launch every projection again with the same weights and workspace:
  // their maps are encoded once per thread (a backend steps on one thread), not per launch.
  thread_local std::unordered_map<MapKey, CUtensorMap, MapKeyHash> encoded;
  const MapKey key{base, rows, k, box_rows, l2_promotion, two_byte_elements};
  if (auto it = encoded.find(key); it != encoded.end()) {
    *map = it->second;
    return true;
  }
  if (encoded.size() >= 4096) encoded.clear();  // bounded: entries of freed buffers go too
  const int elem = two_byte_elements ? 2 : 1;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * elem};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const bool ok = encode(map, two_byte_elements ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
                         const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                         CU_TENSOR_MAP_SWIZZLE_128B,
                         l2_promotion == 0     ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                         : l2_promotion == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                               : CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  if (ok) encoded.emplace(key, *map);
  return ok;
}

}  // namespace kvtier::cuda
