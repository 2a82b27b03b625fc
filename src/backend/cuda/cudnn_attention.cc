// CudnnAttention (see cudnn_attention.h): handle, plan cache, execution.
#include "backend/cuda/cudnn_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/kv_gather.h"

namespace kvtier::cuda {

int64_t CudnnAttention::PlanKeys(int64_t skv, int64_t max_keys) {
  if (skv <= 0) return 0;
  int64_t keys = 64;
  while (keys < skv) keys *= 2;
  const int64_t last = (std::max(max_keys, skv) + 63) / 64 * 64;
  return max_keys > 0 ? std::min(keys, last) : keys;
}

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(const CudnnLibrary& library,
                                                                       const Options& options, cudaStream_t stream,
                                                                       void* workspace, int64_t workspace_bytes) {
  if (options.num_heads <= 0 || options.num_kv_heads <= 0 || options.num_heads % options.num_kv_heads != 0 ||
      !SupportsHeadDim(options.head_dim) || options.max_plans <= 0 || workspace_bytes < kReservedBytes ||
      workspace == nullptr || workspace_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("CudnnAttention: bad shape (", options.num_heads, " heads, ",
                                                   options.num_kv_heads, " kv heads, head_dim ", options.head_dim,
                                                   ", ", options.max_plans, " plans, workspace ", workspace_bytes,
                                                   " bytes)"));
  }
  const CudnnApi& api = library.api();
  cudnnHandle_t handle = nullptr;
  cudnnStatus_t s = api.Create(&handle);
  if (s == CUDNN_STATUS_SUCCESS) {
    s = api.SetStream(handle, stream);
    if (s != CUDNN_STATUS_SUCCESS) api.Destroy(handle);
  }
  if (s != CUDNN_STATUS_SUCCESS) {
    char message[1024] = {0};
    api.GetLastErrorString(message, sizeof(message));
    return absl::InternalError(absl::StrCat("cuDNN ", library.VersionString(), ": no handle: ", api.GetErrorString(s),
                                            " ", message));
  }
  return std::unique_ptr<CudnnAttention>(
      new CudnnAttention(library, options, handle, stream, workspace, workspace_bytes));
}

CudnnAttention::~CudnnAttention() {
  for (auto& [key, plan] : plans_) Destroy(&plan);
  library_.api().Destroy(handle_);
}

void CudnnAttention::Destroy(Plan* plan) {
  for (auto it = plan->descriptors.rbegin(); it != plan->descriptors.rend(); ++it) {
    library_.api().BackendDestroyDescriptor(*it);
  }
  plan->descriptors.clear();
  plan->plan = nullptr;
}

void CudnnAttention::Build(const Key& key, Plan* plan) {
  AttentionGraphShape shape;
  shape.sq = key.first;
  shape.skv = key.second;
  shape.hq = options_.num_heads;
  shape.hk = options_.num_kv_heads;
  shape.d = options_.head_dim;
  const auto start = std::chrono::steady_clock::now();
  CudnnGraphBuilder g(library_.api(), handle_);
  if (options_.fp8) {
    BuildCausalAttentionGraphFp8(g, shape, AttentionGraphForm{}, CUDNN_DATA_FP8_E4M3);
  } else {
    BuildCausalAttentionGraph(g, shape);
  }
  int64_t workspace_bytes = 0;
  cudnnBackendDescriptor_t built = g.ok() ? g.Plan(&workspace_bytes) : nullptr;
  plans_built_.fetch_add(1, std::memory_order_relaxed);
  plan_build_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count(),
      std::memory_order_relaxed);
  const std::string what = absl::StrCat("cuDNN ", library_.VersionString(), options_.fp8 ? " fp8" : "",
                                        " fused attention, ", shape.sq,
                                        " queries over ", shape.skv, " keys: ");
  if (built == nullptr) {
    plan->status = absl::FailedPreconditionError(absl::StrCat(what, g.error()));
  } else if (workspace_bytes > workspace_bytes_) {
    plan->status = absl::ResourceExhaustedError(
        absl::StrCat(what, "its plan wants ", workspace_bytes, " bytes of workspace, ", workspace_bytes_, " held"));
  } else {
    plan->status = absl::OkStatus();
    plan->plan = built;
    plan->descriptors = g.Release();
  }
}

absl::StatusOr<CudnnAttention::Plan*> CudnnAttention::Find(int64_t sq, int64_t skv) {
  if (sq <= 0 || skv < sq) {
    return absl::InvalidArgumentError(absl::StrCat("CudnnAttention: ", sq, " queries over ", skv, " keys"));
  }
  const Key key{sq, PlanKeys(skv, options_.max_keys)};
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    if (static_cast<int32_t>(plans_.size()) >= options_.max_plans) {
      auto oldest = plans_.find(lru_.back());
      Destroy(&oldest->second);
      plans_.erase(oldest);
      lru_.pop_back();
    }
    it = plans_.emplace(key, Plan{}).first;
    lru_.push_front(key);
    it->second.lru = lru_.begin();
    Build(key, &it->second);
  }
  if (!it->second.status.ok()) return it->second.status;
  return &it->second;
}

absl::Status CudnnAttention::Prepare(int64_t sq, int64_t skv) { return Find(sq, skv).status(); }

absl::Status CudnnAttention::Run(const void* q, const void* k, const void* v, void* out, int64_t sq, int64_t skv,
                                 float scale, Fp8AttentionFactors* fp8_factors) {
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr || (options_.fp8 && fp8_factors == nullptr)) {
    return absl::InvalidArgumentError("CudnnAttention::Run: a null buffer");
  }
  auto found = Find(sq, skv);
  if (!found.ok()) return found.status();
  const Plan& plan = **found;
  const CudnnApi& api = library_.api();
  // The lowest float rather than -inf: a padded row is masked whole, and its softmax must not
  // make NaNs (cudnn-frontend masks with it too).
  float neg_inf = std::numeric_limits<float>::lowest();
  const AttentionGraphForm form;  // Build's
  DiagonalScalars diagonal = DiagonalScalarsFor(form, sq, skv);
  std::vector<int64_t> uids = {kUidQ, kUidK, kUidV, kUidO, kUidScale, kUidNegInf};
  std::vector<void*> pointers = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), out, &scale,
                                 &neg_inf};
  if (form.mask == AttentionMask::kPadded) {
    cudaError_t e = WriteChunkLengths(seq_lens_, static_cast<int32_t>(sq), static_cast<int32_t>(skv), stream_);
    if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cuDNN attention: ", cudaGetErrorString(e)));
    uids.insert(uids.end(), {kUidSeqLenQ, kUidSeqLenKv});
    pointers.insert(pointers.end(), {seq_lens_, seq_lens_ + 1});
  }
  for (int i = 0; i < diagonal.count; ++i) {
    uids.push_back(diagonal.uids[i]);
    pointers.push_back(&diagonal.values[i]);
  }
  if (options_.fp8) {
    Fp8AttentionFactors* f = fp8_factors;
    uids.insert(uids.end(), {kUidDescaleQ, kUidDescaleK, kUidDescaleV, kUidDescaleS, kUidScaleS, kUidScaleO, kUidAmaxS,
                             kUidAmaxO});
    pointers.insert(pointers.end(), {&f->descale_q, &f->descale_k, &f->descale_v, &f->descale_s, &f->scale_s,
                                     &f->scale_o, &f->amax_s, &f->amax_o});
  }
  CudnnGraphBuilder g(api, handle_);  // owns the variant pack
  cudnnBackendDescriptor_t pack = g.Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const auto n = static_cast<int64_t>(uids.size());
  g.Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data(), "pack uids");
  g.Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data(), "pack pointers");
  g.Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_, "pack workspace");
  g.Finalize(pack, "variant pack");
  if (!g.ok()) return absl::InternalError(absl::StrCat("cuDNN: ", g.error()));
  const cudnnStatus_t s = api.BackendExecute(handle_, plan.plan, pack);
  if (s != CUDNN_STATUS_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cuDNN fused attention (", sq, " queries over ", skv, " keys) failed: ", api.GetErrorString(s),
                     " ", g.LastError()));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
