// Whether and how fast cuDNN's fused attention runs kvtier's prefill shape, through the
// backend (graph) API that the library would call: causal, bottom-right aligned (a chunk of
// sq queries at the end of skv keys), GQA (32 query heads over 8 K/V heads), head_dim 128,
// bf16 in and out, fp32 softmax. Q and O are kvtier's (rows, heads, head_dim) layout, K and V
// contiguous (rows, kv_heads, head_dim).
//
// Two graphs are tried, each checked against a plain fp32 CUDA reference on small shapes
// and then timed on W4's shapes (32k x 32k, and 4k-query chunks over 32k keys):
//   composite  matmul(Q, K^T) -> scale -> causal select (GEN_INDEX row/col, ADD offset,
//              CMP_GE, BINARY_SELECT -inf) -> softmax as max / sub / exp / sum / div ->
//              matmul(P, V): the pattern cuDNN's fused flash-attention engines match, on
//              every cuDNN 9;
//   unified    one CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR (cuDNN >= 9.13), without a
//              mask (its causal mask is a subgraph from cuDNN 9.21 on): timed only, as the
//              speed of the engine a causal unified graph would run.
// Prints cuDNN's version, each engine config's finalize status, errors with cuDNN's own
// message, and a table.
//
// Build: nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations bench/micro/cudnn_sdpa.cu
//          -lcudnn -o cudnn_sdpa
// Run on the GPU machine with torch's cuDNN first on the path:
//   LD_LIBRARY_PATH=$(python3 -c 'import nvidia.cudnn,os;print(os.path.dirname(nvidia.cudnn.__file__)+"/lib")') ./cudnn_sdpa
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

#define CUDA_OK(x)                                                                             \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                   \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

struct Shape {
  int64_t sq, skv, hq, hk, d;
};

std::string LastCudnnError() {
  char message[2048] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  return message;
}

// Builds one graph's descriptors; the first failing call is kept with cuDNN's message, and
// every later call is skipped, so a build reads straight through.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}
  ~GraphBuilder() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }

  bool ok() const { return status_ == CUDNN_STATUS_SUCCESS; }
  const std::string& error() const { return error_; }

  cudnnBackendDescriptor_t Create(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    Check(cudnnBackendCreateDescriptor(type, &d), "create descriptor");
    if (d != nullptr) owned_.push_back(d);
    return d;
  }
  void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value, const char* what) {
    if (ok()) Check(cudnnBackendSetAttribute(d, name, type, count, value), what);
  }
  void Link(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value,
            const char* what) {
    Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
  }
  void Finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (ok()) Check(cudnnBackendFinalize(d), what);
  }

  // A 4-D tensor: in device memory (bound in the variant pack by uid), virtual (between
  // operations), or a scalar passed by value.
  enum class Kind { kDevice, kVirtual, kByValue };
  cudnnBackendDescriptor_t Tensor(int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims,
                                  std::vector<int64_t> strides, Kind kind, const char* what) {
    cudnnBackendDescriptor_t t = Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    const bool is_virtual = kind == Kind::kVirtual, by_value = kind == Kind::kByValue;
    Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
    Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), what);
    Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), what);
    Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
    Set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    Set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    Finalize(t, what);
    return t;
  }
  cudnnBackendDescriptor_t Scalar(int64_t uid, cudnnDataType_t type, const char* what) {
    return Tensor(uid, type, {1, 1, 1, 1}, {1, 1, 1, 1}, Kind::kByValue, what);
  }

  // y = mode(x[, b[, t]]) elementwise, fp32 math (GEN_INDEX: along `axis`).
  cudnnBackendDescriptor_t Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                     cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, const char* what,
                                     cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
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
    return op;
  }
  void Reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
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
  void Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c, const char* what) {
    cudnnBackendDescriptor_t m = Create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t math = CUDNN_DATA_FLOAT;
    Set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, what);
    Finalize(m, what);
    cudnnBackendDescriptor_t op = Create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    Link(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, what);
    Link(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, what);
    Link(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, what);
    Link(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m, what);
    Finalize(op, what);
    ops_.push_back(op);
  }
  void AddOperation(cudnnBackendDescriptor_t op) { ops_.push_back(op); }

  // The operation graph, then the first engine config of heuristics mode A whose plan
  // finalizes (each one's status printed). Returns the plan or null.
  cudnnBackendDescriptor_t Plan(int64_t* workspace_bytes) {
    cudnnBackendDescriptor_t graph = Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "graph handle");
    Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
        ops_.data(), "graph ops");
    Finalize(graph, "operation graph");
    cudnnBackendDescriptor_t heur = Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    Link(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
    Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    Finalize(heur, "heuristics");
    int64_t count = 0;
    if (ok()) {
      Check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                     nullptr),
            "heuristics count");
    }
    if (!ok()) return nullptr;
    std::printf("    heuristics offer %lld engine configs\n", static_cast<long long>(count));
    std::vector<cudnnBackendDescriptor_t> configs(static_cast<size_t>(count));
    for (auto& c : configs) c = Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (count > 0) {
      Check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                     configs.data()),
            "heuristics results");
    }
    for (int64_t i = 0; i < count && ok(); ++i) {
      cudnnBackendDescriptor_t plan = Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      Set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "plan handle");
      Link(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[static_cast<size_t>(i)], "plan config");
      if (!ok()) return nullptr;
      const cudnnStatus_t s = cudnnBackendFinalize(plan);
      std::printf("    engine config %lld: %s%s%s\n", static_cast<long long>(i), cudnnGetErrorString(s),
                  s == CUDNN_STATUS_SUCCESS ? "" : " ", s == CUDNN_STATUS_SUCCESS ? "" : LastCudnnError().c_str());
      if (s != CUDNN_STATUS_SUCCESS) continue;
      int64_t got = 0;
      Check(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                     workspace_bytes),
            "workspace size");
      return ok() ? plan : nullptr;
    }
    if (ok()) {
      status_ = CUDNN_STATUS_NOT_SUPPORTED;
      error_ = "no engine config finalized";
    }
    return nullptr;
  }

 private:
  void Check(cudnnStatus_t s, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS || !ok()) return;
    status_ = s;
    error_ = std::string(what) + ": " + cudnnGetErrorString(s) + " " + LastCudnnError();
  }

  cudnnHandle_t handle_;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
  std::string error_;
  std::vector<cudnnBackendDescriptor_t> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

enum Uid : int64_t { kQ = 1, kK, kV, kO, kScale, kNegInf, kOffset, kFirstVirtual = 100 };

// Q, K^T, V and O as cuDNN sees kvtier's buffers: (batch 1, heads, rows, d) over
// (rows, heads, d) memory; K^T swaps K's last two dims and strides.
struct IoTensors {
  cudnnBackendDescriptor_t q, kt, v, o;
};
IoTensors MakeIo(GraphBuilder& g, const Shape& s) {
  using K = GraphBuilder::Kind;
  IoTensors io;
  io.q = g.Tensor(kQ, CUDNN_DATA_BFLOAT16, {1, s.hq, s.sq, s.d}, {s.sq * s.hq * s.d, s.d, s.hq * s.d, 1}, K::kDevice,
                  "Q");
  io.kt = g.Tensor(kK, CUDNN_DATA_BFLOAT16, {1, s.hk, s.d, s.skv}, {s.skv * s.hk * s.d, s.d, 1, s.hk * s.d},
                   K::kDevice, "K^T");
  io.v = g.Tensor(kV, CUDNN_DATA_BFLOAT16, {1, s.hk, s.skv, s.d}, {s.skv * s.hk * s.d, s.d, s.hk * s.d, 1},
                  K::kDevice, "V");
  io.o = g.Tensor(kO, CUDNN_DATA_BFLOAT16, {1, s.hq, s.sq, s.d}, {s.sq * s.hq * s.d, s.d, s.hq * s.d, 1}, K::kDevice,
                  "O");
  return io;
}

// The composite causal graph (see the file comment).
void BuildComposite(GraphBuilder& g, const Shape& s) {
  using K = GraphBuilder::Kind;
  const IoTensors io = MakeIo(g, s);
  int64_t uid = kFirstVirtual;
  const std::vector<int64_t> sdims = {1, s.hq, s.sq, s.skv}, sstrides = {s.hq * s.sq * s.skv, s.sq * s.skv, s.skv, 1};
  const std::vector<int64_t> rdims = {1, s.hq, s.sq, 1}, rstrides = {s.hq * s.sq, s.sq, 1, 1};
  auto scores = [&](cudnnDataType_t type, const char* what) {
    return g.Tensor(uid++, type, sdims, sstrides, K::kVirtual, what);
  };
  auto rows = [&](const char* what) { return g.Tensor(uid++, CUDNN_DATA_FLOAT, rdims, rstrides, K::kVirtual, what); };

  cudnnBackendDescriptor_t s0 = scores(CUDNN_DATA_FLOAT, "S = Q K^T");
  g.Matmul(io.q, io.kt, s0, "bmm1");
  cudnnBackendDescriptor_t scale = g.Scalar(kScale, CUDNN_DATA_FLOAT, "scale");
  cudnnBackendDescriptor_t s1 = scores(CUDNN_DATA_FLOAT, "S * scale");
  g.Pointwise(CUDNN_POINTWISE_MUL, s0, scale, nullptr, s1, "attn scale");
  // Causal, bottom-right: query row r sits at key position r + (skv - sq) and sees keys <= it.
  cudnnBackendDescriptor_t row = scores(CUDNN_DATA_INT32, "row index");
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, nullptr, nullptr, row, "gen row index", CUDNN_DATA_INT32, 2);
  cudnnBackendDescriptor_t offset = g.Scalar(kOffset, CUDNN_DATA_INT32, "diagonal offset");
  cudnnBackendDescriptor_t row_pos = scores(CUDNN_DATA_INT32, "row position");
  g.Pointwise(CUDNN_POINTWISE_ADD, row, offset, nullptr, row_pos, "row + offset", CUDNN_DATA_INT32);
  cudnnBackendDescriptor_t col = scores(CUDNN_DATA_INT32, "col index");
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, nullptr, nullptr, col, "gen col index", CUDNN_DATA_INT32, 3);
  cudnnBackendDescriptor_t visible = scores(CUDNN_DATA_BOOLEAN, "visible");
  g.Pointwise(CUDNN_POINTWISE_CMP_GE, row_pos, col, nullptr, visible, "row >= col", CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t neg_inf = g.Scalar(kNegInf, CUDNN_DATA_FLOAT, "-inf");
  cudnnBackendDescriptor_t s2 = scores(CUDNN_DATA_FLOAT, "masked S");
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, s1, neg_inf, visible, s2, "causal select");
  // Softmax.
  cudnnBackendDescriptor_t row_max = rows("row max");
  g.Reduction(CUDNN_REDUCE_TENSOR_MAX, s2, row_max, "max");
  cudnnBackendDescriptor_t s3 = scores(CUDNN_DATA_FLOAT, "S - max");
  g.Pointwise(CUDNN_POINTWISE_SUB, s2, row_max, nullptr, s3, "sub max");
  cudnnBackendDescriptor_t s4 = scores(CUDNN_DATA_FLOAT, "exp");
  g.Pointwise(CUDNN_POINTWISE_EXP, s3, nullptr, nullptr, s4, "exp");
  cudnnBackendDescriptor_t row_sum = rows("row sum");
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, s4, row_sum, "sum");
  cudnnBackendDescriptor_t p = scores(CUDNN_DATA_BFLOAT16, "P");  // bmm2's A in the I/O type
  g.Pointwise(CUDNN_POINTWISE_DIV, s4, row_sum, nullptr, p, "div sum");
  g.Matmul(p, io.v, io.o, "bmm2");
}

// The unified SDPA operation, no mask.
void BuildUnified(GraphBuilder& g, const Shape& s) {
  const IoTensors io = MakeIo(g, s);
  // The unified operation takes K itself, not K^T.
  cudnnBackendDescriptor_t k = g.Tensor(kK, CUDNN_DATA_BFLOAT16, {1, s.hk, s.skv, s.d},
                                        {s.skv * s.hk * s.d, s.d, s.hk * s.d, 1}, GraphBuilder::Kind::kDevice, "K");
  cudnnBackendDescriptor_t scale = g.Scalar(kScale, CUDNN_DATA_FLOAT, "scale");
  cudnnBackendDescriptor_t op = g.Create(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, io.q, "sdpa Q");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k, "sdpa K");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, io.v, "sdpa V");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, io.o, "sdpa O");
  g.Link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale, "sdpa scale");
  g.Finalize(op, "sdpa operation");
  g.AddOperation(op);
}

// out[r, h, :] = softmax over visible keys of (q . k) * scale, times V: one thread per
// (query row, head), fp32 throughout.
__global__ void ReferenceAttention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   float* out, Shape s, float scale, bool causal) {
  const int64_t r = blockIdx.x, h = threadIdx.x;
  if (h >= s.hq) return;
  const int64_t kvh = h / (s.hq / s.hk), last = causal ? r + (s.skv - s.sq) : s.skv - 1;
  const __nv_bfloat16* qr = q + (r * s.hq + h) * s.d;
  float m = -INFINITY, l = 0.0f;
  float acc[128] = {0};
  for (int64_t j = 0; j <= last; ++j) {
    const __nv_bfloat16* kr = k + (j * s.hk + kvh) * s.d;
    float dot = 0.0f;
    for (int64_t i = 0; i < s.d; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    dot *= scale;
    const float m_new = fmaxf(m, dot), correction = expf(m - m_new), p = expf(dot - m_new);
    l = l * correction + p;
    const __nv_bfloat16* vr = v + (j * s.hk + kvh) * s.d;
    for (int64_t i = 0; i < s.d; ++i) acc[i] = acc[i] * correction + p * __bfloat162float(vr[i]);
    m = m_new;
  }
  for (int64_t i = 0; i < s.d; ++i) out[(r * s.hq + h) * s.d + i] = acc[i] / l;
}

__global__ void FillRandom(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65535.0f - 0.5f) * 2.0f);
  }
}

struct Buffers {
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// Builds, checks (when `check`) and times one graph on one shape; prints a table row.
void RunCase(cudnnHandle_t handle, const char* graph_name, bool unified, const Shape& s, bool check) {
  std::printf("  %s, sq %lld skv %lld:\n", graph_name, static_cast<long long>(s.sq), static_cast<long long>(s.skv));
  GraphBuilder g(handle);
  if (unified) {
    BuildUnified(g, s);
  } else {
    BuildComposite(g, s);
  }
  int64_t workspace_bytes = 0;
  // A plan per shape is what a chunked prefill would build: its cost decides whether plans are
  // cached per shape, padded to a few shapes, or built with dynamic shapes.
  const auto build_start = std::chrono::steady_clock::now();
  cudnnBackendDescriptor_t plan = g.ok() ? g.Plan(&workspace_bytes) : nullptr;
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - build_start).count();
  std::printf("    graph + plan built in %.1f ms, workspace %lld bytes\n", build_ms,
              static_cast<long long>(workspace_bytes));
  if (plan == nullptr) {
    std::printf("  RESULT %s sq=%lld skv=%lld: not built: %s\n", graph_name, static_cast<long long>(s.sq),
                static_cast<long long>(s.skv), g.error().c_str());
    return;
  }
  Buffers b;
  const int64_t nq = s.sq * s.hq * s.d, nkv = s.skv * s.hk * s.d;
  CUDA_OK(cudaMalloc(&b.q, nq * 2));
  CUDA_OK(cudaMalloc(&b.o, nq * 2));
  CUDA_OK(cudaMalloc(&b.k, nkv * 2));
  CUDA_OK(cudaMalloc(&b.v, nkv * 2));
  if (workspace_bytes > 0) CUDA_OK(cudaMalloc(&b.workspace, workspace_bytes));
  FillRandom<<<1024, 256>>>(b.q, nq, 1);
  FillRandom<<<1024, 256>>>(b.k, nkv, 2);
  FillRandom<<<1024, 256>>>(b.v, nkv, 3);
  float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  float neg_inf = -INFINITY;
  int32_t offset = static_cast<int32_t>(s.skv - s.sq);
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kScale};
  std::vector<void*> ptrs = {b.q, b.k, b.v, b.o, &scale};
  if (!unified) {
    uids.insert(uids.end(), {kNegInf, kOffset});
    ptrs.insert(ptrs.end(), {&neg_inf, &offset});
  }
  GraphBuilder packs(handle);
  cudnnBackendDescriptor_t pack = packs.Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data(),
            "pack uids");
  packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
            ptrs.data(), "pack pointers");
  packs.Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b.workspace, "pack workspace");
  packs.Finalize(pack, "variant pack");
  cudnnStatus_t st = packs.ok() ? cudnnBackendExecute(handle, plan, pack) : CUDNN_STATUS_BAD_PARAM;
  if (st != CUDNN_STATUS_SUCCESS) {
    std::printf("  RESULT %s sq=%lld skv=%lld: execute failed: %s %s %s\n", graph_name, static_cast<long long>(s.sq),
                static_cast<long long>(s.skv), cudnnGetErrorString(st), packs.error().c_str(), LastCudnnError().c_str());
  } else {
    CUDA_OK(cudaDeviceSynchronize());
    double max_err = -1.0;
    if (check) {
      float* ref = nullptr;
      CUDA_OK(cudaMalloc(&ref, nq * 4));
      ReferenceAttention<<<static_cast<unsigned>(s.sq), 32>>>(b.q, b.k, b.v, ref, s, scale, !unified);
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> want(static_cast<size_t>(nq));
      std::vector<__nv_bfloat16> got(static_cast<size_t>(nq));
      CUDA_OK(cudaMemcpy(want.data(), ref, nq * 4, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got.data(), b.o, nq * 2, cudaMemcpyDeviceToHost));
      max_err = 0.0;
      for (int64_t i = 0; i < nq; ++i) {
        max_err = std::fmax(max_err, std::fabs(static_cast<double>(__bfloat162float(got[i])) - want[i]));
      }
      CUDA_OK(cudaFree(ref));
    }
    cudaEvent_t t0, t1;
    CUDA_OK(cudaEventCreate(&t0));
    CUDA_OK(cudaEventCreate(&t1));
    const int iters = s.sq * s.skv > (int64_t{1} << 28) ? 5 : 20;
    CUDA_OK(cudaEventRecord(t0));
    for (int i = 0; i < iters; ++i) cudnnBackendExecute(handle, plan, pack);
    CUDA_OK(cudaEventRecord(t1));
    CUDA_OK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
    ms /= static_cast<float>(iters);
    // Causal work: the visible (query, key) pairs; the unified graph here computes them all.
    const double pairs = unified ? static_cast<double>(s.sq) * s.skv
                                 : static_cast<double>(s.sq) * (s.skv - s.sq) + 0.5 * s.sq * (s.sq + 1.0);
    const double tflops = 4.0 * pairs * s.d * s.hq / (ms * 1e-3) / 1e12;
    std::printf("  RESULT %s sq=%lld skv=%lld: %.3f ms/layer, x32 layers %.1f ms, %.0f TFLOP/s, max abs err %s%.4g\n",
                graph_name, static_cast<long long>(s.sq), static_cast<long long>(s.skv), ms, 32.0 * ms, tflops,
                check ? "" : "(not checked) ", max_err);
  }
  cudaFree(b.q);
  cudaFree(b.k);
  cudaFree(b.v);
  cudaFree(b.o);
  if (b.workspace != nullptr) cudaFree(b.workspace);
}

}  // namespace

int main() {
  std::printf("cuDNN %zu (headers %d)\n", cudnnGetVersion(), CUDNN_VERSION);
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::printf("cudnnCreate failed: %s\n", LastCudnnError().c_str());
    return 1;
  }
  const Shape checks[] = {{256, 256, 32, 8, 128}, {128, 384, 32, 8, 128}, {200, 333, 32, 8, 128}};
  const Shape timed[] = {{32768, 32768, 32, 8, 128}, {4096, 32768, 32, 8, 128}, {2048, 2048, 32, 8, 128},
                         {8192, 8192, 32, 8, 128}};
  for (bool unified : {false, true}) {
    const char* name = unified ? "unified(no mask)" : "composite(causal)";
    if (unified && cudnnGetVersion() < 91300) {
      std::printf("  RESULT %s: skipped, needs cuDNN >= 9.13\n", name);
      continue;
    }
    for (const Shape& s : checks) RunCase(handle, name, unified, s, true);
    for (const Shape& s : timed) RunCase(handle, name, unified, s, false);
  }
  cudnnDestroy(handle);
  return 0;
}
