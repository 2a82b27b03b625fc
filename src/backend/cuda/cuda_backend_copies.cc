// CudaBackend's tier copies (Backend's copy methods, carried out by TierCopies) and the
// page-locked host memory they copy from and to.
#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_backend.h"
#include "common/status_macros.h"

namespace kvtier {

absl::Status CudaBackend::CopyBlocksToHost(std::span<const BlockCopy> copies) {
  return copies_->CopySync(copies, cudaMemcpyDeviceToHost);
}

absl::Status CudaBackend::CopyBlocksFromHost(std::span<const BlockCopy> copies) {
  return copies_->CopySync(copies, cudaMemcpyHostToDevice);
}

absl::Status CudaBackend::PrefetchBlocksFromHost(std::span<const BlockCopy> copies) {
  return copies_->Prefetch(copies);
}

absl::Status CudaBackend::WaitForPrefetches() { return copies_->MarkPrefetches(); }

absl::Status CudaBackend::CopyBlock(int32_t src_block, int32_t dst_block) {
  return copies_->CopyBlock(src_block, dst_block);
}

absl::StatusOr<int64_t> CudaBackend::StartCopiesToHost(std::span<const BlockCopy> copies) {
  return copies_->StartToHost(copies);
}

absl::StatusOr<bool> CudaBackend::CopiesDone(int64_t ticket) { return copies_->Done(ticket); }

absl::Status CudaBackend::WaitForCopies(int64_t ticket) { return copies_->Wait(ticket); }

absl::StatusOr<void*> CudaBackend::AllocateHostMemory(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocMapped);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaHostAlloc of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
  }
  return ptr;
}

void CudaBackend::FreeHostMemory(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

// Called from the KV manager's pinning thread: only the runtime (thread-safe), no member.
// Mapped: attention streams host-resident blocks by reading them from the device
// (host_kv_stream.h).
absl::Status CudaBackend::PinHostMemory(void* ptr, size_t bytes) {
  const cudaError_t err = cudaHostRegister(ptr, bytes, cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaHostRegister of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

void CudaBackend::UnpinHostMemory(void* ptr, size_t) {
  if (ptr != nullptr) cudaHostUnregister(ptr);
}

}  // namespace kvtier
