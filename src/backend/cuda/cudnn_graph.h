// cuDNN backend-API graph building for kvtier's prefill attention, shared by the library
// (cudnn_attention.h) and the probe (bench/micro/cudnn_sdpa.cu): a GraphBuilder that keeps
// the first failure with cuDNN's own message, and the causal attention graph on kvtier's
// layouts. Calls cuDNN through a CudnnApi table. One builder per thread.
#ifndef KVTIER_BACKEND_CUDA_CUDNN_GRAPH_H_
#define KVTIER_BACKEND_CUDA_CUDNN_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_api.h"

namespace kvtier::cuda {

// One attention call: sq query rows at the end of skv key rows (bottom-right causal),
// hq query heads over hk K/V heads, head_dim d.
struct AttentionGraphShape {
  int64_t sq = 0, skv = 0, hq = 0, hk = 0, d = 0;
};

// The uids of the graph's tensors: device buffers and by-value scalars bound in the variant
// pack; virtual tensors from kFirstVirtual on.
enum AttentionGraphUid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidScale,
  kUidNegInf,
  kUidOffset,
  kUidKeys,     // skv, by value (AttentionMask::kAddKeysSubQueries)
  kUidQueries,  // sq, by value
  kUidStats,    // the softmax stats (max + log sum) in device memory, when the form asks
  kUidSeqLenQ,  // sq and skv as int32 tensors in device memory (AttentionMask::kPadded)
  kUidSeqLenKv,
  // The fp8 graph's factors and maxima (fp32, one value each, in device memory).
  kUidDescaleQ,
  kUidDescaleK,
  kUidDescaleV,
  kUidDescaleS,
  kUidScaleS,
  kUidScaleO,
  kUidAmaxS,
  kUidAmaxO,
  kUidFirstVirtual = 100
};

// Builds one graph's descriptors (and owns them); the first failing call is kept with cuDNN's
// message and every later call is skipped, so that a build reads straight through.
class CudnnGraphBuilder {
 public:
  CudnnGraphBuilder(const CudnnApi& api, cudnnHandle_t handle) : api_(api), handle_(handle) {}
  ~CudnnGraphBuilder();
  CudnnGraphBuilder(const CudnnGraphBuilder&) = delete;
  CudnnGraphBuilder& operator=(const CudnnGraphBuilder&) = delete;

  bool ok() const { return status_ == CUDNN_STATUS_SUCCESS; }
  const std::string& error() const { return error_; }
  // One line per engine config Plan tried: its index, cuDNN's status and message.
  const std::string& plan_log() const { return plan_log_; }

  cudnnBackendDescriptor_t Create(cudnnBackendDescriptorType_t type);
  void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value, const char* what);
  void Link(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value,
            const char* what);
  void Finalize(cudnnBackendDescriptor_t d, const char* what);

  // A 4-D tensor: in device memory (bound in the variant pack by uid), virtual (between
  // operations), or a scalar passed by value.
  enum class Kind { kDevice, kVirtual, kByValue };
  cudnnBackendDescriptor_t Tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& strides, Kind kind, const char* what);
  cudnnBackendDescriptor_t Scalar(int64_t uid, cudnnDataType_t type, const char* what);

  // y = mode(x[, b[, t]]) elementwise (GEN_INDEX: along `axis`); added to the graph.
  void Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, const char* what,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void Reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 const char* what);
  // c = a b; the overrides (int32 tensors, or null) give the rows of a (M), columns of b (N)
  // or the shared dim (K) that count, the rest padding.
  void Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c, const char* what,
              cudnnBackendDescriptor_t m_override = nullptr, cudnnBackendDescriptor_t n_override = nullptr,
              cudnnBackendDescriptor_t k_override = nullptr);
  void AddOperation(cudnnBackendDescriptor_t op) { ops_.push_back(op); }

  // The operation graph, then the first engine config of heuristics `mode` whose plan
  // finalizes (each try in plan_log()). Returns the plan (owned by this builder) or null,
  // with its workspace bytes.
  cudnnBackendDescriptor_t Plan(int64_t* workspace_bytes, cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A);

  // Hands the descriptors over to the caller (who destroys them with
  // BackendDestroyDescriptor, last first); the builder then owns none.
  std::vector<cudnnBackendDescriptor_t> Release();

  // cuDNN's last error message (cudnnGetLastErrorString).
  std::string LastError() const;

 private:
  void Check(cudnnStatus_t s, const char* what);

  const CudnnApi& api_;
  cudnnHandle_t handle_;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
  std::string error_;
  std::string plan_log_;
  std::vector<cudnnBackendDescriptor_t> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

// Q, K^T, V and O as cuDNN sees kvtier's buffers: (batch 1, heads, rows, d) over
// (rows, heads, d) memory; K^T swaps K's last two dims and strides. Q, K and V in in_type, O
// in o_type.
struct AttentionIoTensors {
  cudnnBackendDescriptor_t q, kt, v, o;
};
AttentionIoTensors MakeAttentionIo(CudnnGraphBuilder& g, const AttentionGraphShape& s,
                                   cudnnDataType_t in_type = CUDNN_DATA_BFLOAT16,
                                   cudnnDataType_t o_type = CUDNN_DATA_BFLOAT16);

// How the causal mask places the diagonal: none (every key visible); top-left (row >= col);
// row + offset >= col with one by-value offset skv - sq; cudnn-frontend's form without
// padding, row + skv - sq >= col as an ADD of skv and a SUB of sq (two by-value int32
// scalars); or its form with padding (kPadded): the actual sq and skv as device tensors, the
// matmuls' M, N and K overridden by them, rows and columns past them masked, then row + skv -
// sq >= col. cuDNN's fused engines take the diagonal of the forms without padding from the
// graph's dims rather than from the scalars' values, so only kPadded serves a plan whose key
// rows exceed the chunk's keys.
enum class AttentionMask { kNone, kTopLeft, kOffset, kAddKeysSubQueries, kPadded };

// The shape of the composite graph's softmax and mask. cuDNN's fused flash-attention engines
// match a pattern rather than a meaning, so the form matters: the default is the one
// cudnn-frontend's composite SDPA node emits (the softmax stats max + log(sum) computed even
// for inference, as a virtual tensor; P in V's type, as bmm2 takes A and B of one type; the
// frontend's mask). cuDNN 9.19 on sm_90 refuses an fp32 P ("A and B need to have the same
// datatype"), and without the stats branch accepts only the frontend's mask. The other forms
// are kept for the probe (bench/micro/cudnn_sdpa.cu), which reports which a cuDNN accepts.
struct AttentionGraphForm {
  bool softmax_stats = true;         // the LOG / ADD branch of flash attention's softmax
  bool stats_in_memory = false;      // the stats as a device tensor (kUidStats), else virtual
  cudnnDataType_t p_type = CUDNN_DATA_BFLOAT16;  // bmm2's A
  AttentionMask mask = AttentionMask::kPadded;
};

// The composite causal graph: matmul(Q, K^T) -> * scale -> causal select (GEN_INDEX
// row / col, CMP_GE, else -inf) -> softmax as max / sub / exp / sum / div (with the stats
// branch) -> matmul(P, V). bf16 in and out, fp32 scores and softmax. The scale and -inf
// (fp32) and the diagonal's scalars (int32) are by-value scalars of the variant pack, so one
// plan serves every offset.
void BuildCausalAttentionGraph(CudnnGraphBuilder& g, const AttentionGraphShape& s,
                               const AttentionGraphForm& form = {});

// The same causal graph on fp8 (E4M3) Q, K and V, in the form cudnn-frontend's sdpa_fp8 node
// emits: S = Q K^T * scale * descale_q * descale_k, masked as `form` says; softmax (stats
// as the form says); amax of the probabilities into kUidAmaxS; P = probabilities * scale_s in
// E4M3; O = P V * descale_s * descale_v, its amax into kUidAmaxO, times scale_o, in o_type
// (E4M3 or bf16). The descales, scales and maxima are fp32 device tensors of one value (the
// kUidDescale*, kUidScale* and kUidAmax* uids); form.p_type is not read.
void BuildCausalAttentionGraphFp8(CudnnGraphBuilder& g, const AttentionGraphShape& s, const AttentionGraphForm& form,
                                  cudnnDataType_t o_type);

// The by-value scalars a run of `form` binds besides Q, K, V, O, the scale and -inf: their
// uids and values for sq queries over skv keys (int32; at most two).
struct DiagonalScalars {
  int count = 0;
  int64_t uids[2] = {0, 0};
  int32_t values[2] = {0, 0};
};
DiagonalScalars DiagonalScalarsFor(const AttentionGraphForm& form, int64_t sq, int64_t skv);

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_CUDNN_GRAPH_H_
