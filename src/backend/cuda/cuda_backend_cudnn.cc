// CudaBackend's prefill attention on cuDNN (see cuda_backend.h, CudaOptions::prefill_cudnn):
// loading it at creation, and what compute_path says ran.
#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_library.h"
#include "common/log.h"

namespace kvtier {

cuda::CudnnPrefill::Options CudaBackend::CudnnPrefillOptions() const {
  cuda::CudnnPrefill::Options o;
  o.num_heads = static_cast<int32_t>(config_.num_heads);
  o.num_kv_heads = static_cast<int32_t>(config_.num_kv_heads);
  o.head_dim = static_cast<int32_t>(config_.head_dim);
  o.max_context = capacity_.max_context;
  o.fp8_attention = layout_.dtype == DType::kF8E4M3 && options_.cuda.prefill_fp8_attention;
  o.max_chunk_tokens = capacity_.max_tokens;
  if (options_.cuda.prefill_cudnn == CudnnPrefillUse::kFullChunks) {
    // Each cuDNN call costs host time (its variant pack, the lengths, the gather) that a
    // short context's attention does not hide, while over a long context its engine's lead
    // grows with the keys (docs/CUDA_BACKEND.md has the runs).
    o.min_chunk_tokens = capacity_.max_tokens;
    o.min_context = 4 * capacity_.max_tokens;
  }
  return o;
}

absl::StatusOr<std::unique_ptr<cuda::CudnnPrefill>> CudaBackend::CreateCudnnPrefill(const cuda::CudnnLibrary& library) {
  cuda::CudnnPrefill::Options options = CudnnPrefillOptions();
  auto prefill = cuda::CudnnPrefill::Create(library, options, stream_, memory_);
  if (!prefill.ok() || !options.fp8_attention) return prefill;
  // A cuDNN or GPU without the fp8 engine: its bf16 attention over the KV gathered into bf16.
  const absl::Status fp8 = (*prefill)->CheckPlan(options.max_chunk_tokens);
  if (fp8.ok()) return prefill;
  prefill->reset();
  cudnn_fp8_refusal_ = std::string(fp8.message());
  Log(LogLevel::kInfo, "cuda backend: cuDNN's fp8 prefill attention is not used: ", fp8.message());
  options.fp8_attention = false;
  return cuda::CudnnPrefill::Create(library, options, stream_, memory_);
}

absl::Status CudaBackend::InitCudnnPrefill() {
  if (options_.cuda.prefill_cudnn == CudnnPrefillUse::kNever) return absl::OkStatus();
  absl::Status why = absl::OkStatus();
  if (!kernels_.prefill_cudnn) {
    why = absl::UnimplementedError(kernels_.prefill_cudnn_refusal);
  } else if (absl::StatusOr<const cuda::CudnnLibrary*> library = cuda::CudnnLibrary::Shared(); !library.ok()) {
    why = library.status();
  } else if (auto prefill = CreateCudnnPrefill(**library); !prefill.ok()) {
    why = prefill.status();
  } else {
    cudnn_ = std::move(*prefill);
    return absl::OkStatus();
  }
  // Not an error (a machine without cuDNN is a normal one): the backend's own kernel runs
  // every prefill, and compute_path says why.
  cudnn_unavailable_ = std::string(why.message());
  Log(LogLevel::kInfo, "cuda backend: prefill attention on cuDNN is not used: ", why.message());
  return absl::OkStatus();
}

std::string CudaBackend::compute_path() const {
  const std::string own = !kernels_.fast_attention                               ? "generic"
                          : kernels_.prefill_kernel == cuda::PrefillKernel::kWgmma ? "wgmma"
                                                                                   : "mma";
  std::string prefill = own;
  if (cudnn_ != nullptr) {
    prefill = cudnn_->Describe(own);
    if (!cudnn_fp8_refusal_.empty()) absl::StrAppend(&prefill, " (fp8 attention not used: ", cudnn_fp8_refusal_, ")");
  } else if (!cudnn_unavailable_.empty()) {
    prefill = absl::StrCat(own, " (cudnn not used: ", cudnn_unavailable_, ")");
  }
  std::string overlap;
  if (attention_fork_ != nullptr) {
    overlap = absl::StrCat("; decode attention beside prefill attention in ", attention_fork_->forks(), " layers");
  }
  return absl::StrCat("cuda, prefill attention ", prefill, overlap);
}

}  // namespace kvtier
