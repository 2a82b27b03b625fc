// Fp8Gemm (fp8_gemm.h).
#include "backend/cuda/fp8_gemm.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::cuda {
namespace {

absl::Status LtError(const char* what, cublasStatus_t status) {
  return absl::AbortedError(absl::StrCat("cuBLASLt ", what, ": status ", static_cast<int>(status)));
}

#define LT_RETURN_IF_ERROR(what, expr)                   \
  do {                                                   \
    const cublasStatus_t lt_status_ = (expr);            \
    if (lt_status_ != CUBLAS_STATUS_SUCCESS) return LtError(what, lt_status_); \
  } while (0)

}  // namespace

// Column-major, as cuBLASLt sees row-major data: out^T (n x rows) = w8^T' (n x k) * x8' (k x rows),
// the "TN" layout its fp8 kernels require; A's scales are per row of out^T (weights'
// channels), B's per column (tokens).
struct Fp8Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // A varying plan's row counts its algorithm refused.
  std::set<int> refused_rows;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

absl::StatusOr<std::unique_ptr<Fp8Gemm>> Fp8Gemm::Create(void* workspace, size_t workspace_bytes) {
  cublasLtHandle_t handle = nullptr;
  LT_RETURN_IF_ERROR("create", cublasLtCreate(&handle));
  std::unique_ptr<Fp8Gemm> gemm(new Fp8Gemm(handle, workspace, workspace_bytes));
  // A probe shape: a device or library without outer-vector fp8 scaling has no algorithm.
  absl::StatusOr<Plan*> probe = gemm->PlanFor(256, 4096, 4096, CUDA_R_16BF);
  if (!probe.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cuBLASLt offers no fp8 GEMM with outer-vector scales here: ", probe.status().message()));
  }
  return gemm;
}

Fp8Gemm::Fp8Gemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

Fp8Gemm::~Fp8Gemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

absl::StatusOr<Fp8Gemm::Plan*> Fp8Gemm::PlanFor(int rows, int k, int n, cudaDataType_t out_type, bool varying) {
  const auto key = std::make_tuple(rows, k, n, static_cast<int>(out_type), varying);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  LT_RETURN_IF_ERROR("matmul descriptor", cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_RETURN_IF_ERROR("transa", cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_RETURN_IF_ERROR("transb", cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  LT_RETURN_IF_ERROR("a scale mode",
                     cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
  LT_RETURN_IF_ERROR("b scale mode",
                     cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
  // The heuristic may look at the scale pointers: any aligned device address serves until Run
  // sets the real ones.
  const void* stand_in = workspace_;
  LT_RETURN_IF_ERROR("a scales", cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                                &stand_in, sizeof stand_in));
  LT_RETURN_IF_ERROR("b scales", cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                                &stand_in, sizeof stand_in));
  LT_RETURN_IF_ERROR("a layout", cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8F_E4M3, k, n, k));
  LT_RETURN_IF_ERROR("b layout", cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8F_E4M3, k, rows, k));
  LT_RETURN_IF_ERROR("d layout", cublasLtMatrixLayoutCreate(&plan->d, out_type, n, rows, n));
  cublasLtMatmulPreference_t pref = nullptr;
  LT_RETURN_IF_ERROR("preference", cublasLtMatmulPreferenceCreate(&pref));
  cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &workspace_bytes_, sizeof workspace_bytes_);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t heuristic =
      set != CUBLAS_STATUS_SUCCESS
          ? set
          : cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, &result,
                                           &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (heuristic != CUBLAS_STATUS_SUCCESS || found == 0) {
    return absl::AbortedError(absl::StrCat("cuBLASLt has no fp8 algorithm for ", rows, " x ", k, " x ", n,
                                           " (heuristic status ", static_cast<int>(heuristic), ")"));
  }
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

absl::Status Fp8Gemm::Run(const uint8_t* x8, const float* x_scales, const uint8_t* w8, const float* w_scales,
                          int rows, int k, int n, void* out, cudaDataType_t out_type, cudaStream_t stream) {
  ASSIGN_OR_RETURN(Plan * plan, PlanFor(rows, k, n, out_type));
  return Launch(plan, x8, x_scales, w8, w_scales, out, stream);
}

absl::Status Fp8Gemm::PrepareVaryingRows(int max_rows, int k, int n, cudaDataType_t out_type) {
  for (int bucket = kVaryingRowsMin;; bucket *= 2) {
    RETURN_IF_ERROR(PlanFor(bucket, k, n, out_type, /*varying=*/true).status());
    if (bucket >= max_rows) return absl::OkStatus();
  }
}

absl::Status Fp8Gemm::RunVaryingRows(const uint8_t* x8, const float* x_scales, const uint8_t* w8,
                                     const float* w_scales, int rows, int k, int n, void* out,
                                     cudaDataType_t out_type, cudaStream_t stream) {
  int bucket = kVaryingRowsMin;
  while (bucket < rows) bucket *= 2;
  ASSIGN_OR_RETURN(Plan * plan, PlanFor(bucket, k, n, out_type, /*varying=*/true));
  const uint64_t cols = static_cast<uint64_t>(rows);
  for (cublasLtMatrixLayout_t layout : {plan->b, plan->d}) {
    LT_RETURN_IF_ERROR("rows", cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &cols,
                                                                sizeof cols));
  }
  // The bucket's algorithm serves any count below it as a rule; a count it refuses (cuBLASLt
  // checks the problem before it launches anything) takes Run's own plan from then on.
  if (!plan->refused_rows.contains(rows)) {
    const absl::Status launched = Launch(plan, x8, x_scales, w8, w_scales, out, stream);
    if (launched.ok()) return launched;
    plan->refused_rows.insert(rows);
  }
  return Run(x8, x_scales, w8, w_scales, rows, k, n, out, out_type, stream);
}

absl::Status Fp8Gemm::Launch(Plan* plan, const uint8_t* x8, const float* x_scales, const uint8_t* w8,
                             const float* w_scales, void* out, cudaStream_t stream) {
  LT_RETURN_IF_ERROR("a scales", cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                                &w_scales, sizeof w_scales));
  LT_RETURN_IF_ERROR("b scales", cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                                &x_scales, sizeof x_scales));
  const float alpha = 1.0f, beta = 0.0f;
  LT_RETURN_IF_ERROR("matmul", cublasLtMatmul(handle_, plan->desc, &alpha, w8, plan->a, x8, plan->b, &beta, out,
                                              plan->d, out, plan->d, &plan->algo, workspace_, workspace_bytes_,
                                              stream));
  return absl::OkStatus();
}

}  // namespace kvtier::cuda
