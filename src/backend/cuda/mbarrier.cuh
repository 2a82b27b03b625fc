// Shared-memory mbarriers and the copy engine's 1-D bulk copies (sm_90): the few PTX
// instructions the TMA and bulk-copy kernels share. An mbarrier counts its arrivals and the
// bytes the copies it guards still owe (expect_tx), and completes a phase when both reach zero;
// a waiter gives the parity of the phase it waits for (0 for a barrier's first use). Barriers
// and copy sources are 8- and 16-byte aligned; a bulk copy's size is a multiple of 16.
#ifndef KVTIER_BACKEND_CUDA_MBARRIER_CUH_
#define KVTIER_BACKEND_CUDA_MBARRIER_CUH_

#include <cstdint>

namespace kvtier::cuda {

__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// After initializing barriers, before a copy or another thread uses them: the inits become
// visible to the copy engine (the async proxy) and to the cluster.
__device__ __forceinline__ void MbarInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void MbarExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// An L2 policy for bytes read once: first out of L2.
__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// `bytes` from global `src` into shared `dst` by the copy engine; completes its bytes on `bar`.
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                         uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

// Asks the copy engine to bring `bytes` (a multiple of 16) from global `src` (16-byte aligned)
// into L2, with nothing waiting on it: a later kernel's reads of them then hit L2.
__device__ __forceinline__ void BulkPrefetchL2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// Share `cta` of `ctas` of BulkPrefetchL2 over `bytes` (a multiple of 16) from `base`: whole
// 16-byte pieces, the shares in order. Each share must be under 4 GiB (L2PrefetchShareFits).
__device__ __forceinline__ void PrefetchShareL2(const void* base, int64_t bytes, int64_t cta, int64_t ctas) {
  const int64_t pieces = bytes / 16;
  const int64_t per_cta = (pieces + ctas - 1) / ctas;
  const int64_t first = cta * per_cta;
  const int64_t count = min(per_cta, pieces - first);
  if (count > 0) BulkPrefetchL2(static_cast<const uint8_t*>(base) + first * 16, static_cast<uint32_t>(count * 16));
}

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_MBARRIER_CUH_
