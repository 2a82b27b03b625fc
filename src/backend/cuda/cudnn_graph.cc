// CudnnGraphBuilder and the causal attention graph (see cudnn_graph.h).
#include "backend/cuda/cudnn_graph.h"

#include <utility>

namespace kvtier::cuda {

CudnnGraphBuilder::~CudnnGraphBuilder() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.BackendDestroyDescriptor(*it);
}

std::vector<cudnnBackendDescriptor_t> CudnnGraphBuilder::Release() {
  ops_.clear();
  return std::exchange(owned_, {});
}

std::string CudnnGraphBuilder::LastError() const {
  char message[2048] = {0};
  api_.GetLastErrorString(message, sizeof(message));
  return message;
}

void CudnnGraphBuilder::Check(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS || !ok()) return;
  status_ = s;
  error_ = std::string(what) + ": " + api_.GetErrorString(s) + " " + LastError();
}

cudnnBackendDescriptor_t CudnnGraphBuilder::Create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  Check(api_.BackendCreateDescriptor(type, &d), "create descriptor");
  if (d != nullptr) owned_.push_back(d);
  return d;
}

void CudnnGraphBuilder::Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                            cudnnBackendAttributeType_t type, int64_t count, const void* value, const char* what) {
  if (ok()) Check(api_.BackendSetAttribute(d, name, type, count, value), what);
}

void CudnnGraphBuilder::Link(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                             cudnnBackendDescriptor_t value, const char* what) {
  Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}

void CudnnGraphBuilder::Finalize(cudnnBackendDescriptor_t d, const char* what) {
  if (ok()) Check(api_.BackendFinalize(d), what);
}

cudnnBackendDescriptor_t CudnnGraphBuilder::Tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                                                   const std::vector<int64_t>& strides, Kind kind, const char* what) {
  cudnnBackendDescriptor_t t = Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  const bool is_virtual = kind == Kind::kVirtual, by_value = kind == Kind::kByValue;
  Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
  Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
  Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data(), what);
  Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data(), what);
  Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
  Set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
  Set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
  Finalize(t, what);
  return t;
}

cudnnBackendDescriptor_t CudnnGraphBuilder::Scalar(int64_t uid, cudnnDataType_t type, const char* what) {
  return Tensor(uid, type, {1, 1, 1, 1}, {1, 1, 1, 1}, Kind::kByValue, what);
}

void CudnnGraphBuilder::Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                  cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, const char* what,
                                  cudnnDataType_t math, int64_t axis) {
  cudnnBackendDescriptor_t pw = Create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
  Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, what);
  if (axis >= 0) Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
  Finalize(pw, what);
  cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  Link(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, what);
  Link(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, what);
  if (b != nullptr) Link(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, what);
  if (t != nullptr) Link(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, what);
  Link(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, what);
  Finalize(op, what);
  ops_.push_back(op);
}

void CudnnGraphBuilder::Reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                                  const char* what) {
  cudnnBackendDescriptor_t r = Create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  Set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
  Set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, what);
  Finalize(r, what);
  cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  Link(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, what);
  Link(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, what);
  Link(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, what);
  Finalize(op, what);
  ops_.push_back(op);
}

void CudnnGraphBuilder::Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
                               const char* what, cudnnBackendDescriptor_t m_override,
                               cudnnBackendDescriptor_t n_override, cudnnBackendDescriptor_t k_override) {
  cudnnBackendDescriptor_t m = Create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  Set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, what);
  Finalize(m, what);
  cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  Link(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, what);
  Link(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, what);
  Link(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, what);
  Link(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m, what);
  if (m_override != nullptr) Link(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override, what);
  if (n_override != nullptr) Link(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override, what);
  if (k_override != nullptr) Link(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override, what);
  Finalize(op, what);
  ops_.push_back(op);
}

cudnnBackendDescriptor_t CudnnGraphBuilder::Plan(int64_t* workspace_bytes, cudnnBackendHeurMode_t mode) {
  cudnnBackendDescriptor_t graph = Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "graph handle");
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
      ops_.data(), "graph ops");
  Finalize(graph, "operation graph");
  cudnnBackendDescriptor_t heur = Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  Link(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
  Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  Finalize(heur, "heuristics");
  int64_t count = 0;
  if (ok()) {
    Check(api_.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr),
          "heuristics count");
  }
  if (!ok()) return nullptr;
  plan_log_ += "heuristics offer " + std::to_string(count) + " engine configs\n";
  std::vector<cudnnBackendDescriptor_t> configs(static_cast<size_t>(count));
  for (auto& c : configs) c = Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (count > 0) {
    Check(api_.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                   configs.data()),
          "heuristics results");
  }
  for (int64_t i = 0; i < count && ok(); ++i) {
    cudnnBackendDescriptor_t plan = Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    Set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "plan handle");
    Link(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[static_cast<size_t>(i)], "plan config");
    if (!ok()) return nullptr;
    const cudnnStatus_t s = api_.BackendFinalize(plan);
    plan_log_ += "engine config " + std::to_string(i) + ": " + api_.GetErrorString(s);
    if (s != CUDNN_STATUS_SUCCESS) plan_log_ += " " + LastError();
    plan_log_ += "\n";
    if (s != CUDNN_STATUS_SUCCESS) continue;
    int64_t got = 0;
    Check(api_.BackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                   workspace_bytes),
          "workspace size");
    return ok() ? plan : nullptr;
  }
  if (ok()) {
    status_ = CUDNN_STATUS_NOT_SUPPORTED;
    error_ = "no engine config finalized (" + std::to_string(count) + " offered)";
  }
  return nullptr;
}

AttentionIoTensors MakeAttentionIo(CudnnGraphBuilder& g, const AttentionGraphShape& s, cudnnDataType_t in_type,
                                   cudnnDataType_t o_type) {
  using K = CudnnGraphBuilder::Kind;
  AttentionIoTensors io;
  io.q = g.Tensor(kUidQ, in_type, {1, s.hq, s.sq, s.d}, {s.sq * s.hq * s.d, s.d, s.hq * s.d, 1},
                  K::kDevice, "Q");
  io.kt = g.Tensor(kUidK, in_type, {1, s.hk, s.d, s.skv}, {s.skv * s.hk * s.d, s.d, 1, s.hk * s.d},
                   K::kDevice, "K^T");
  io.v = g.Tensor(kUidV, in_type, {1, s.hk, s.skv, s.d}, {s.skv * s.hk * s.d, s.d, s.hk * s.d, 1},
                  K::kDevice, "V");
  io.o = g.Tensor(kUidO, o_type, {1, s.hq, s.sq, s.d}, {s.sq * s.hq * s.d, s.d, s.hq * s.d, 1},
                  K::kDevice, "O");
  return io;
}

DiagonalScalars DiagonalScalarsFor(const AttentionGraphForm& form, int64_t sq, int64_t skv) {
  DiagonalScalars d;
  if (form.mask == AttentionMask::kOffset) {
    d.count = 1;
    d.uids[0] = kUidOffset;
    d.values[0] = static_cast<int32_t>(skv - sq);
  } else if (form.mask == AttentionMask::kAddKeysSubQueries) {
    d.count = 2;
    d.uids[0] = kUidKeys;
    d.values[0] = static_cast<int32_t>(skv);
    d.uids[1] = kUidQueries;
    d.values[1] = static_cast<int32_t>(sq);
  }
  return d;
}

namespace {

// The graph's virtual tensors: scores (1, hq, sq, skv) and per-row values (1, hq, sq, 1).
struct VirtualTensors {
  CudnnGraphBuilder& g;
  const AttentionGraphShape& s;
  int64_t uid = kUidFirstVirtual;
  cudnnBackendDescriptor_t Scores(cudnnDataType_t type, const char* what) {
    return g.Tensor(uid++, type, {1, s.hq, s.sq, s.skv}, {s.hq * s.sq * s.skv, s.sq * s.skv, s.skv, 1},
                    CudnnGraphBuilder::Kind::kVirtual, what);
  }
  cudnnBackendDescriptor_t Rows(const char* what) {
    return g.Tensor(uid++, CUDNN_DATA_FLOAT, {1, s.hq, s.sq, 1}, {s.hq * s.sq, s.sq, 1, 1},
                    CudnnGraphBuilder::Kind::kVirtual, what);
  }
};

// The scores with the form's padding and causal masks applied (seq_q / seq_kv: the padded
// form's length tensors, else null).
cudnnBackendDescriptor_t MaskScores(VirtualTensors& v, const AttentionGraphForm& form, cudnnBackendDescriptor_t s2,
                                    cudnnBackendDescriptor_t seq_q, cudnnBackendDescriptor_t seq_kv) {
  CudnnGraphBuilder& g = v.g;
  const bool padded = form.mask == AttentionMask::kPadded;
  cudnnBackendDescriptor_t neg_inf = nullptr;
  if (form.mask != AttentionMask::kNone) neg_inf = g.Scalar(kUidNegInf, CUDNN_DATA_FLOAT, "-inf");
  if (padded) {
    // Rows past sq and columns past skv: -inf.
    cudnnBackendDescriptor_t row = v.Scores(CUDNN_DATA_INT32, "padding row index");
    g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s2, nullptr, nullptr, row, "gen padding row index", CUDNN_DATA_INT32, 2);
    cudnnBackendDescriptor_t col = v.Scores(CUDNN_DATA_INT32, "padding col index");
    g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s2, nullptr, nullptr, col, "gen padding col index", CUDNN_DATA_INT32, 3);
    cudnnBackendDescriptor_t row_in = v.Scores(CUDNN_DATA_BOOLEAN, "row < sq");
    g.Pointwise(CUDNN_POINTWISE_CMP_LT, row, seq_q, nullptr, row_in, "row < sq", CUDNN_DATA_BOOLEAN);
    cudnnBackendDescriptor_t col_in = v.Scores(CUDNN_DATA_BOOLEAN, "col < skv");
    g.Pointwise(CUDNN_POINTWISE_CMP_LT, col, seq_kv, nullptr, col_in, "col < skv", CUDNN_DATA_BOOLEAN);
    cudnnBackendDescriptor_t inside = v.Scores(CUDNN_DATA_BOOLEAN, "inside");
    g.Pointwise(CUDNN_POINTWISE_LOGICAL_AND, row_in, col_in, nullptr, inside, "row and col inside", CUDNN_DATA_BOOLEAN);
    cudnnBackendDescriptor_t unpadded = v.Scores(CUDNN_DATA_FLOAT, "unpadded S");
    g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, s2, neg_inf, inside, unpadded, "padding select");
    s2 = unpadded;
  }
  if (form.mask == AttentionMask::kNone) return s2;
  // Query row r sits at key position r + skv - sq (bottom-right) and sees keys <= it.
  cudnnBackendDescriptor_t row = v.Scores(CUDNN_DATA_INT32, "row index");
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s2, nullptr, nullptr, row, "gen row index", CUDNN_DATA_INT32, 2);
  if (form.mask == AttentionMask::kOffset) {
    cudnnBackendDescriptor_t offset = g.Scalar(kUidOffset, CUDNN_DATA_INT32, "diagonal offset");
    cudnnBackendDescriptor_t moved = v.Scores(CUDNN_DATA_INT32, "row position");
    g.Pointwise(CUDNN_POINTWISE_ADD, row, offset, nullptr, moved, "row + offset", CUDNN_DATA_INT32);
    row = moved;
  } else if (padded) {
    cudnnBackendDescriptor_t plus = v.Scores(CUDNN_DATA_INT32, "row + skv");
    g.Pointwise(CUDNN_POINTWISE_ADD, row, seq_kv, nullptr, plus, "row + skv", CUDNN_DATA_INT32);
    cudnnBackendDescriptor_t moved = v.Scores(CUDNN_DATA_INT32, "row + skv - sq");
    g.Pointwise(CUDNN_POINTWISE_SUB, plus, seq_q, nullptr, moved, "row + skv - sq", CUDNN_DATA_INT32);
    row = moved;
  } else if (form.mask == AttentionMask::kAddKeysSubQueries) {
    cudnnBackendDescriptor_t keys = g.Scalar(kUidKeys, CUDNN_DATA_INT32, "skv");
    cudnnBackendDescriptor_t plus = v.Scores(CUDNN_DATA_INT32, "row + skv");
    g.Pointwise(CUDNN_POINTWISE_ADD, row, keys, nullptr, plus, "row + skv", CUDNN_DATA_INT32);
    cudnnBackendDescriptor_t queries = g.Scalar(kUidQueries, CUDNN_DATA_INT32, "sq");
    cudnnBackendDescriptor_t moved = v.Scores(CUDNN_DATA_INT32, "row + skv - sq");
    g.Pointwise(CUDNN_POINTWISE_SUB, plus, queries, nullptr, moved, "row + skv - sq", CUDNN_DATA_INT32);
    row = moved;
  }
  cudnnBackendDescriptor_t col = v.Scores(CUDNN_DATA_INT32, "col index");
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s2, nullptr, nullptr, col, "gen col index", CUDNN_DATA_INT32, 3);
  cudnnBackendDescriptor_t visible = v.Scores(CUDNN_DATA_BOOLEAN, "visible");
  g.Pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, visible, "row >= col", CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t masked = v.Scores(CUDNN_DATA_FLOAT, "masked S");
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, s2, neg_inf, visible, masked, "causal select");
  return masked;
}

// softmax(s2) as max / sub / exp / sum / div, with the form's stats branch; the result in
// p_type.
cudnnBackendDescriptor_t Softmax(VirtualTensors& v, const AttentionGraphForm& form, cudnnBackendDescriptor_t s2,
                                 cudnnDataType_t p_type) {
  CudnnGraphBuilder& g = v.g;
  cudnnBackendDescriptor_t row_max = v.Rows("row max");
  g.Reduction(CUDNN_REDUCE_TENSOR_MAX, s2, row_max, "max");
  cudnnBackendDescriptor_t s3 = v.Scores(CUDNN_DATA_FLOAT, "S - max");
  g.Pointwise(CUDNN_POINTWISE_SUB, s2, row_max, nullptr, s3, "sub max");
  cudnnBackendDescriptor_t s4 = v.Scores(CUDNN_DATA_FLOAT, "exp");
  g.Pointwise(CUDNN_POINTWISE_EXP, s3, nullptr, nullptr, s4, "exp");
  cudnnBackendDescriptor_t row_sum = v.Rows("row sum");
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, s4, row_sum, "sum");
  if (form.softmax_stats) {
    cudnnBackendDescriptor_t log_sum = v.Rows("log sum");
    g.Pointwise(CUDNN_POINTWISE_LOG, row_sum, nullptr, nullptr, log_sum, "log sum");
    cudnnBackendDescriptor_t stats =
        form.stats_in_memory ? g.Tensor(kUidStats, CUDNN_DATA_FLOAT, {1, v.s.hq, v.s.sq, 1},
                                        {v.s.hq * v.s.sq, v.s.sq, 1, 1}, CudnnGraphBuilder::Kind::kDevice, "stats")
                             : v.Rows("stats");
    g.Pointwise(CUDNN_POINTWISE_ADD, row_max, log_sum, nullptr, stats, "max + log sum");
  }
  cudnnBackendDescriptor_t p = v.Scores(p_type, "P");
  g.Pointwise(CUDNN_POINTWISE_DIV, s4, row_sum, nullptr, p, "div sum");
  return p;
}

struct SeqLens {
  cudnnBackendDescriptor_t q = nullptr, kv = nullptr;
};
SeqLens MakeSeqLens(CudnnGraphBuilder& g, const AttentionGraphForm& form) {
  SeqLens l;
  if (form.mask != AttentionMask::kPadded) return l;
  using K = CudnnGraphBuilder::Kind;
  l.q = g.Tensor(kUidSeqLenQ, CUDNN_DATA_INT32, {1, 1, 1, 1}, {1, 1, 1, 1}, K::kDevice, "seq len q");
  l.kv = g.Tensor(kUidSeqLenKv, CUDNN_DATA_INT32, {1, 1, 1, 1}, {1, 1, 1, 1}, K::kDevice, "seq len kv");
  return l;
}

}  // namespace

void BuildCausalAttentionGraph(CudnnGraphBuilder& g, const AttentionGraphShape& s, const AttentionGraphForm& form) {
  const AttentionIoTensors io = MakeAttentionIo(g, s);
  VirtualTensors v{g, s};
  const SeqLens lens = MakeSeqLens(g, form);
  cudnnBackendDescriptor_t s0 = v.Scores(CUDNN_DATA_FLOAT, "S = Q K^T");
  g.Matmul(io.q, io.kt, s0, "bmm1", lens.q, lens.kv);
  cudnnBackendDescriptor_t scale = g.Scalar(kUidScale, CUDNN_DATA_FLOAT, "scale");
  cudnnBackendDescriptor_t s1 = v.Scores(CUDNN_DATA_FLOAT, "S * scale");
  g.Pointwise(CUDNN_POINTWISE_MUL, s0, scale, nullptr, s1, "attn scale");
  cudnnBackendDescriptor_t p = Softmax(v, form, MaskScores(v, form, s1, lens.q, lens.kv), form.p_type);
  g.Matmul(p, io.v, io.o, "bmm2", lens.q, nullptr, lens.kv);
}

void BuildCausalAttentionGraphFp8(CudnnGraphBuilder& g, const AttentionGraphShape& s, const AttentionGraphForm& form,
                                  cudnnDataType_t o_type) {
  using K = CudnnGraphBuilder::Kind;
  const AttentionIoTensors io = MakeAttentionIo(g, s, CUDNN_DATA_FP8_E4M3, o_type);
  VirtualTensors v{g, s};
  const SeqLens lens = MakeSeqLens(g, form);
  auto device_scalar = [&](int64_t uid, const char* what) {
    return g.Tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, K::kDevice, what);
  };
  auto times = [&](cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t factor, const char* what) {
    cudnnBackendDescriptor_t y = v.Scores(CUDNN_DATA_FLOAT, what);
    g.Pointwise(CUDNN_POINTWISE_MUL, x, factor, nullptr, y, what);
    return y;
  };
  // S = Q K^T * scale * descale_q * descale_k, in that order (cudnn-frontend's sdpa_fp8).
  cudnnBackendDescriptor_t s0 = v.Scores(CUDNN_DATA_FLOAT, "S = Q K^T");
  g.Matmul(io.q, io.kt, s0, "bmm1", lens.q, lens.kv);
  cudnnBackendDescriptor_t s1 = times(s0, g.Scalar(kUidScale, CUDNN_DATA_FLOAT, "scale"), "attn scale");
  s1 = times(s1, device_scalar(kUidDescaleQ, "descale q"), "descale q");
  s1 = times(s1, device_scalar(kUidDescaleK, "descale k"), "descale k");
  cudnnBackendDescriptor_t probs = Softmax(v, form, MaskScores(v, form, s1, lens.q, lens.kv), CUDNN_DATA_FLOAT);
  g.Reduction(CUDNN_REDUCE_TENSOR_AMAX, probs, device_scalar(kUidAmaxS, "amax s"), "amax s");
  cudnnBackendDescriptor_t p = v.Scores(CUDNN_DATA_FP8_E4M3, "P in fp8");
  g.Pointwise(CUDNN_POINTWISE_MUL, probs, device_scalar(kUidScaleS, "scale s"), nullptr, p, "scale s");
  // O = P V * descale_s * descale_v, its amax, then * scale_o.
  const std::vector<int64_t> odims = {1, s.hq, s.sq, s.d}, ostrides = {s.sq * s.hq * s.d, s.d, s.hq * s.d, 1};
  auto out_rows = [&](const char* what) { return g.Tensor(v.uid++, CUDNN_DATA_FLOAT, odims, ostrides, K::kVirtual, what); };
  cudnnBackendDescriptor_t o0 = out_rows("P V");
  g.Matmul(p, io.v, o0, "bmm2", lens.q, nullptr, lens.kv);
  cudnnBackendDescriptor_t o1 = out_rows("descale s");
  g.Pointwise(CUDNN_POINTWISE_MUL, o0, device_scalar(kUidDescaleS, "descale s"), nullptr, o1, "descale s");
  cudnnBackendDescriptor_t o2 = out_rows("descale v");
  g.Pointwise(CUDNN_POINTWISE_MUL, o1, device_scalar(kUidDescaleV, "descale v"), nullptr, o2, "descale v");
  g.Pointwise(CUDNN_POINTWISE_MUL, o2, device_scalar(kUidScaleO, "scale o"), nullptr, io.o, "scale o");
  g.Reduction(CUDNN_REDUCE_TENSOR_AMAX, o2, device_scalar(kUidAmaxO, "amax o"), "amax o");
}

}  // namespace kvtier::cuda
