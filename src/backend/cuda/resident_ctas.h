// How many CTAs of a kernel the current device holds at once (its SM count times the
// occupancy API's CTAs per SM), remembered per device, kernel and shared-memory size: the
// launchers that pick a kernel by whether its whole grid is resident ask at every launch, so
// the driver is asked once per shape. Thread-safe.
#ifndef KVTIER_BACKEND_CUDA_RESIDENT_CTAS_H_
#define KVTIER_BACKEND_CUDA_RESIDENT_CTAS_H_

#include <cstddef>
#include <cstdint>

namespace kvtier::cuda {

// 0 where the device or the kernel cannot be queried (the error is cleared).
int64_t ResidentCtas(const void* kernel, int threads, size_t dynamic_shared);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_RESIDENT_CTAS_H_
