// DecodeAttention (backend/cuda/decode_attention.h) against an fp64 host reference on
// shuffled paged blocks, fresh random inputs and NaN-poisoned outputs, bf16 and fp16; a CUDA-graph replay
// test (positions, tables and q change in device memory between replays); and, only with
// KVTIER_DECODE_BENCH=1, timings on the Llama-3-8B shape against the old PagedAttention.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kernels.h"
#include "backend/kv_layout.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::DeviceArray;
using cuda_test::kDefaultLaunch;
using cuda_test::Random16;
using cuda_test::RelativeError;
using cuda_test::ToF32;
using cuda_test::Tolerance;
constexpr uint16_t kPoisonBits = 0xFFFF;

// Decode rows, row i in chunk i with a shuffled block table of `capacity` positions (at
// least its context), plus `extra` step tokens that are not decode rows, at shuffled step
// token indices.
struct DecodeWorld {
  KvLayout layout;
  int num_heads = 0;
  std::vector<int> contexts;
  std::vector<int32_t> rows, token_chunk, token_pos, indptr, indices;
  int64_t num_blocks = 0;
  int num_tokens = 0;

  DecodeWorld(int heads, int kv_heads, int head_dim, int block_tokens, int num_layers,
              std::vector<int> ctx, int extra, int capacity, std::mt19937& rng)
      : num_heads(heads), contexts(std::move(ctx)) {
    layout.num_layers = num_layers;
    layout.num_kv_heads = kv_heads;
    layout.head_dim = head_dim;
    layout.block_tokens = block_tokens;
    layout.dtype = DType::kBF16;
    const int n = static_cast<int>(contexts.size());
    indptr.push_back(0);
    for (int i = 0; i < n; ++i) {
      indptr.push_back(indptr.back() + TableSize(std::max(capacity, contexts[i])));
    }
    num_blocks = indptr.back() + 3;
    num_tokens = n + extra;
    std::vector<int32_t> perm(num_tokens);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    rows.assign(perm.begin(), perm.begin() + n);
    token_chunk.assign(num_tokens, 0);
    token_pos.assign(num_tokens, 0);
    Reassign(contexts, rng);
  }

  int TableSize(int positions) const {
    return static_cast<int>((positions + layout.block_tokens - 1) / layout.block_tokens);
  }
  // New contexts (within capacity) and freshly shuffled block ids.
  void Reassign(const std::vector<int>& ctx, std::mt19937& rng) {
    contexts = ctx;
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    indices.assign(ids.begin(), ids.begin() + indptr.back());
    for (size_t i = 0; i < rows.size(); ++i) {
      token_chunk[rows[i]] = static_cast<int32_t>(i);
      token_pos[rows[i]] = contexts[i] - 1;
    }
  }
  bool IsRow(int token) const { return std::find(rows.begin(), rows.end(), token) != rows.end(); }
};

// fp64 reference of decode row i: (num_heads, head_dim); the pool holds T elements.
template <typename T>
std::vector<float> Reference(const DecodeWorld& w, const std::vector<uint16_t>& pool,
                             const std::vector<float>& q, int layer, int i) {
  const KvLayout& L = w.layout;
  const int d = static_cast<int>(L.head_dim), bt = static_cast<int>(L.block_tokens);
  const int group = w.num_heads / static_cast<int>(L.num_kv_heads);
  const int ctx = w.contexts[i];
  const int64_t epb = L.ElementsPerBlock();
  const int32_t* table = w.indices.data() + w.indptr[i];
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> out(static_cast<size_t>(w.num_heads) * d);
  std::vector<double> score(ctx), acc(d);
  for (int h = 0; h < w.num_heads; ++h) {
    const int kvh = h / group;
    const float* qh = q.data() + (static_cast<int64_t>(w.rows[i]) * w.num_heads + h) * d;
    double mx = -INFINITY;
    for (int j = 0; j < ctx; ++j) {
      const uint16_t* k = pool.data() + table[j / bt] * epb + L.ElementOffset(layer, 0, kvh, j % bt);
      double s = 0;
      for (int e = 0; e < d; ++e) s += static_cast<double>(qh[e]) * cuda_test::Elem16<T>::Value(k[e]);
      score[j] = s * scale;
      mx = std::max(mx, score[j]);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double sum = 0;
    for (int j = 0; j < ctx; ++j) {
      const double p = std::exp(score[j] - mx);
      sum += p;
      const uint16_t* v = pool.data() + table[j / bt] * epb + L.ElementOffset(layer, 1, kvh, j % bt);
      for (int e = 0; e < d; ++e) acc[e] += p * cuda_test::Elem16<T>::Value(v[e]);
    }
    for (int e = 0; e < d; ++e) out[static_cast<size_t>(h) * d + e] = static_cast<float>(acc[e] / sum);
  }
  return out;
}

// Device copies of a world's metadata, pool, q, out and split buffers.
struct DeviceDecode {
  DeviceArray<uint16_t> pool, q, out;
  DeviceArray<int32_t> rows, chunk, pos, indptr, indices;
  DeviceArray<float> partial_out, partial_ml;
  DeviceArray<uint32_t> counters;

  DeviceDecode(const DecodeWorld& w, int max_splits)
      : pool(w.num_blocks * w.layout.ElementsPerBlock()),
        q(static_cast<size_t>(w.num_tokens) * w.num_heads * w.layout.head_dim),
        out(q.size()),
        rows(w.rows.size()),
        chunk(w.num_tokens),
        pos(w.num_tokens),
        indptr(w.indptr.size()),
        indices(w.indices.size()),
        partial_out(DecodePartialFloats(static_cast<int32_t>(w.rows.size()), max_splits,
                                        w.num_heads, static_cast<int32_t>(w.layout.head_dim))),
        partial_ml(DecodePartialMlFloats(static_cast<int32_t>(w.rows.size()), max_splits,
                                         w.num_heads)),
        counters(DecodeCounterInts(static_cast<int32_t>(w.rows.size()),
                                   static_cast<int32_t>(w.layout.num_kv_heads))) {
    cudaMemset(counters.get(), 0, counters.size() * sizeof(uint32_t));  // once, at allocation
    rows.Upload(w.rows);
    indptr.Upload(w.indptr);
    UploadStep(w);
  }
  void UploadStep(const DecodeWorld& w) {
    chunk.Upload(w.token_chunk);
    pos.Upload(w.token_pos);
    indices.Upload(w.indices);
  }
  template <typename T>
  PagedKv<T> Kv(const DecodeWorld& w) const {
    PagedKv<T> kv;
    kv.pool = reinterpret_cast<T*>(pool.get());
    kv.indices = indices.get();
    kv.indptr = indptr.get();
    kv.block_elements = w.layout.ElementsPerBlock();
    kv.num_kv_heads = static_cast<int32_t>(w.layout.num_kv_heads);
    kv.head_dim = static_cast<int32_t>(w.layout.head_dim);
    kv.block_tokens = static_cast<int32_t>(w.layout.block_tokens);
    return kv;
  }
  template <typename T>
  DecodeAttentionParams<T> Params(const DecodeWorld& w, int layer, int max_splits) const {
    DecodeAttentionParams<T> p;
    p.q = reinterpret_cast<const T*>(q.get());
    p.out = reinterpret_cast<T*>(out.get());
    p.rows = rows.get();
    p.num_rows = static_cast<int32_t>(w.rows.size());
    p.num_heads = w.num_heads;
    p.layer = layer;
    p.max_splits = max_splits;
    p.partial_out = partial_out.get();
    p.partial_ml = partial_ml.get();
    p.split_counters = counters.get();
    return p;
  }
  StepTokens Tokens(const DecodeWorld& w) const {
    return StepTokens{chunk.get(), pos.get(), w.num_tokens};
  }
};

int SmCount() {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) return 132;
  return props.multiProcessorCount;
}

// Every decode row matches the reference; every element of a non-decode token is still the
// poison.
template <typename T>
std::vector<std::vector<float>> References(const DecodeWorld& w, const std::vector<uint16_t>& pool,
                                           const std::vector<float>& q, int layer) {
  std::vector<std::vector<float>> refs;
  for (size_t i = 0; i < w.rows.size(); ++i) {
    refs.push_back(Reference<T>(w, pool, q, layer, static_cast<int>(i)));
  }
  return refs;
}

template <typename T>
void ExpectMatches(const DecodeWorld& w, const std::vector<std::vector<float>>& refs,
                   const std::vector<uint16_t>& out, const std::string& what) {
  const size_t row_elems = static_cast<size_t>(w.num_heads) * w.layout.head_dim;
  for (size_t i = 0; i < w.rows.size(); ++i) {
    const std::vector<uint16_t> bits(out.begin() + w.rows[i] * row_elems,
                                     out.begin() + (w.rows[i] + 1) * row_elems);
    const double err = RelativeError(ToF32<T>(bits), refs[i]);
    EXPECT_LT(err, Tolerance<T>()) << what << ": row " << i << " ctx " << w.contexts[i];
  }
  for (int t = 0; t < w.num_tokens; ++t) {
    if (w.IsRow(t)) continue;
    int64_t written = 0;
    for (size_t e = 0; e < row_elems; ++e) written += out[t * row_elems + e] != kPoisonBits;
    EXPECT_EQ(written, 0) << what << ": non-decode token " << t << " was written";
  }
}

struct DecodeCase {
  int heads, kv_heads, head_dim, block_tokens;
  int max_splits;  // 0: DecodeMaxSplits
};

class DecodeAttentionTest : public ::testing::TestWithParam<DecodeCase> {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
  std::mt19937 rng_{std::random_device{}()};
};

TEST_P(DecodeAttentionTest, MatchesReferenceOnShuffledBlocks) {
  const DecodeCase c = GetParam();
  ASSERT_TRUE(DecodeAttentionSupported(c.head_dim, c.heads, c.kv_heads));
  DecodeWorld w(c.heads, c.kv_heads, c.head_dim, c.block_tokens, /*num_layers=*/2,
                {1, 2, 15, 16, 17, 100, 1000, 5000, 40000}, /*extra=*/3, /*capacity=*/0, rng_);
  const int num_rows = static_cast<int>(w.rows.size());
  const int max_splits =
      c.max_splits > 0 ? c.max_splits : DecodeMaxSplits(num_rows, c.kv_heads, SmCount());
  const int layer = 1;
  DeviceDecode dev(w, max_splits);
  cuda_test::ForEachElem([&]<typename T>() {
    CUDA_ASSERT(FillRandom(reinterpret_cast<T*>(dev.pool.get()), dev.pool.size(), rng_(), 0.0f,
                           2.0f, nullptr));
    const std::vector<uint16_t> pool = dev.pool.Download();
    const Data16 q = Random16<T>(dev.q.size(), rng_, -2, 2);
    dev.q.Upload(q.bits);
    const std::vector<std::vector<float>> refs = References<T>(w, pool, q.values, layer);
    // Twice: the second launch proves the split counters were left at zero.
    for (int run = 0; run < 2; ++run) {
      dev.out.Poison();
      ASSERT_EQ(DecodeAttention(dev.Params<T>(w, layer, max_splits), dev.Tokens(w),
                                dev.Kv<T>(w), nullptr, kDefaultLaunch),
                cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      ExpectMatches<T>(w, refs, dev.out.Download(),
                       "run " + std::to_string(run) + " max_splits " + std::to_string(max_splits));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeAttentionTest,
    ::testing::Values(DecodeCase{8, 2, 128, 16, 0},     // GQA 4 (Llama-3), heuristic splits
                      DecodeCase{8, 2, 128, 16, 1},     // one split: direct writes only
                      DecodeCase{8, 2, 128, 16, kDecodeMaxSplitsLimit},
                      DecodeCase{2, 2, 64, 16, 0},      // MHA, head_dim 64
                      DecodeCase{14, 2, 128, 16, 0},    // group 7
                      DecodeCase{8, 1, 64, 8, 5},       // group 8, 8-token blocks
                      DecodeCase{6, 2, 128, 24, 7}),    // group 3, non-power-of-two blocks
    [](const ::testing::TestParamInfo<DecodeCase>& info) {
      const DecodeCase& c = info.param;
      return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
             std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens) + "s" +
             std::to_string(c.max_splits);
    });

TEST(DecodeAttentionShapes, SupportedShapes) {
  EXPECT_TRUE(DecodeAttentionSupported(128, 32, 8));
  EXPECT_TRUE(DecodeAttentionSupported(64, 7, 1));
  EXPECT_FALSE(DecodeAttentionSupported(96, 8, 2));
  EXPECT_FALSE(DecodeAttentionSupported(128, 36, 4));  // group 9
  EXPECT_FALSE(DecodeAttentionSupported(128, 10, 4));  // not a multiple
  EXPECT_EQ(DecodeMaxSplits(256, 8, 132), 1);
  EXPECT_GE(DecodeMaxSplits(1, 8, 132), 32);
  EXPECT_EQ(DecodeMaxSplits(64, 8, 132), 1);
  EXPECT_LE(DecodeMaxSplits(1, 1, 132), kDecodeMaxSplitsLimit);
}

// One launch captured once; replays after pos, block tables and q change in device memory
// (contexts grow and shrink, so rows switch between one split and many).
TEST(DecodeAttentionGraph, ReplaysWithNewPositionsAndTables) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng{std::random_device{}()};
  const int heads = 8, kv_heads = 2, head_dim = 128, bt = 16, capacity = 4096, layer = 0;
  const std::vector<std::vector<int>> steps = {
      {5, 300, 3000}, {4000, 17, 64}, {1, 1000, 2}, {2500, 2500, 4096}, {5, 300, 3000}};
  DecodeWorld w(heads, kv_heads, head_dim, bt, /*num_layers=*/1, steps[0], /*extra=*/1,
                capacity, rng);
  const int max_splits = DecodeMaxSplits(static_cast<int32_t>(w.rows.size()), kv_heads, SmCount());
  DeviceDecode dev(w, max_splits);
  CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(dev.pool.get()), dev.pool.size(), rng(),
                         0.0f, 2.0f, nullptr));
  const std::vector<uint16_t> pool = dev.pool.Download();

  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_ASSERT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_EQ(DecodeAttention(dev.Params<bf16>(w, layer, max_splits), dev.Tokens(w),
                            dev.Kv<bf16>(w), stream, kDefaultLaunch),
            cudaSuccess);
  CUDA_ASSERT(cudaStreamEndCapture(stream, &graph));
  CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));

  for (size_t step = 0; step < steps.size(); ++step) {
    w.Reassign(steps[step], rng);
    dev.UploadStep(w);
    const Data16 q = Random16<bf16>(dev.q.size(), rng, -2, 2);
    dev.q.Upload(q.bits);
    dev.out.Poison();
    CUDA_ASSERT(cudaDeviceSynchronize());
    CUDA_ASSERT(cudaGraphLaunch(exec, stream));
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    ExpectMatches<bf16>(w, References<bf16>(w, pool, q.values, layer), dev.out.Download(),
                        "replay " + std::to_string(step));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---------------------------------------------------------------------------------------
// Timings (KVTIER_DECODE_BENCH=1): Llama-3-8B shape, one layer's attention, KV rotated over
// 32 layers (and 8 row copies for W1) so it is not L2-resident.

bool BenchEnabled() {
  const char* v = std::getenv("KVTIER_DECODE_BENCH");
  return v != nullptr && std::string(v) == "1";
}

// Median of per-launch event timings (us); launch(i) enqueues repetition i.
template <typename Launch>
double MedianUs(cudaStream_t stream, int warm, int reps, Launch launch) {
  for (int i = 0; i < warm; ++i) launch(i);
  std::vector<cudaEvent_t> ev(2 * reps);
  for (cudaEvent_t& e : ev) cudaEventCreate(&e);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(ev[2 * i], stream);
    launch(warm + i);
    cudaEventRecord(ev[2 * i + 1], stream);
  }
  cudaStreamSynchronize(stream);
  std::vector<double> us(reps);
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
    us[i] = ms * 1e3;
  }
  for (cudaEvent_t& e : ev) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  return us[reps / 2];
}

// Per-launch time (us) of `per_graph` launches (launch(i), i < per_graph) captured in one
// graph: median over replays, divided by per_graph.
template <typename Launch>
double GraphUs(cudaStream_t stream, int per_graph, Launch launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
  for (int i = 0; i < per_graph; ++i) launch(i);
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) return -1;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return -1;
  const double us = MedianUs(stream, 3, 20, [&](int) { cudaGraphLaunch(exec, stream); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us / per_graph;
}

struct BenchCase {
  const char* name;
  int rows, ctx_lo, ctx_hi, copies;
  std::vector<int> sweep;
};

TEST(DecodeAttentionBench, Llama3Shapes) {
  KVT_SKIP_WITHOUT_CUDA();
  if (!BenchEnabled()) GTEST_SKIP() << "set KVTIER_DECODE_BENCH=1 to time";
  std::mt19937 rng{1234};
  const int heads = 32, kv_heads = 8, head_dim = 128, bt = 16, layers = 32;
  const int sm = SmCount();
  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<BenchCase> cases = {
      {"W1", 1, 600, 600, 8, {8, 16}},
      {"W2", 64, 512, 768, 1, {1, 2}},
      {"W2b", 16, 512, 768, 1, {2, 3, 4}},
      {"W4", 1, 32768, 32768, 1, {32, 40, 48, 56}},
      {"W4b", 4, 8192, 8192, 1, {8, 12, 16}},
  };
  for (const BenchCase& bc : cases) {
    std::uniform_int_distribution<int> ctx_dist(bc.ctx_lo, bc.ctx_hi);
    std::vector<int> base(bc.rows), ctx;
    for (int& c : base) c = ctx_dist(rng);
    for (int k = 0; k < bc.copies; ++k) ctx.insert(ctx.end(), base.begin(), base.end());
    DecodeWorld w(heads, kv_heads, head_dim, bt, layers, ctx, 0, 0, rng);
    // Rows in step-token order so copy k is rows [k*rows, (k+1)*rows).
    std::iota(w.rows.begin(), w.rows.end(), 0);
    w.Reassign(ctx, rng);
    DeviceDecode dev(w, kDecodeMaxSplitsLimit);
    ASSERT_NE(dev.pool.get(), nullptr) << "pool allocation failed";
    CUDA_ASSERT(cudaDeviceSynchronize());  // the poison memsets ran on the legacy stream
    CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(dev.pool.get()), dev.pool.size(), 7, 0.0f,
                           2.0f, stream));
    CUDA_ASSERT(FillRandom(reinterpret_cast<bf16*>(dev.q.get()), dev.q.size(), 8, 0.0f, 2.0f,
                           stream));
    double kv_bytes = 0;
    for (int r = 0; r < bc.rows; ++r) kv_bytes += 2.0 * base[r] * kv_heads * head_dim * 2;
    const PagedKv<bf16> kv = dev.Kv<bf16>(w);
    const StepTokens tokens = dev.Tokens(w);

    auto run_new = [&](int i, int max_splits) {
      DecodeAttentionParams<bf16> p = dev.Params<bf16>(w, i % layers, max_splits);
      p.rows = dev.rows.get() + (i % bc.copies) * bc.rows;
      p.num_rows = bc.rows;
      EXPECT_EQ(DecodeAttention(p, tokens, kv, stream, kDefaultLaunch), cudaSuccess);
    };

    // Old kernel: planned once for copy 0's rows; copy k's items point at its chunks/tokens.
    std::vector<ChunkShape> shapes;
    for (int r = 0; r < bc.rows; ++r) shapes.push_back({1, base[r] - 1});
    AttentionPlanOptions o;
    o.num_heads = heads;
    o.num_kv_heads = kv_heads;
    o.max_rows = AttentionMaxRows(head_dim);
    o.partial_slots = 4096;  // CudaBackend: max(max_tokens_per_step, 16 * max_sequences)
    AttentionPlan plan;
    ASSERT_TRUE(PlanAttention(shapes, o, &plan).ok());
    std::vector<AttentionItem> items;
    std::vector<int32_t> splits, bases;
    for (int k = 0; k < bc.copies; ++k) {
      for (AttentionItem it : plan.items) {
        it.chunk += k * bc.rows;
        it.token_begin += k * bc.rows;
        items.push_back(it);
      }
      splits.insert(splits.end(), plan.num_splits.begin(), plan.num_splits.end());
      bases.insert(bases.end(), plan.partial_base.begin(), plan.partial_base.end());
    }
    DeviceArray<AttentionItem> d_items(items.size());
    DeviceArray<int32_t> d_splits(splits.size()), d_bases(bases.size());
    DeviceArray<float> d_po(o.partial_slots * heads * head_dim), d_pml(o.partial_slots * heads * 2);
    DeviceArray<uint16_t> old_out(dev.out.size());
    d_items.Upload(items);
    d_splits.Upload(splits);
    d_bases.Upload(bases);
    CUDA_ASSERT(cudaDeviceSynchronize());
    auto run_old = [&](int i) {
      AttentionParams<bf16> p;
      p.q = reinterpret_cast<const bf16*>(dev.q.get());
      p.out = reinterpret_cast<bf16*>(old_out.get());
      p.items = d_items.get() + (i % bc.copies) * plan.items.size();
      p.num_items = static_cast<int32_t>(plan.items.size());
      p.num_heads = heads;
      p.layer = i % layers;
      p.max_rows = plan.max_rows;
      p.any_split = plan.any_split;
      EXPECT_EQ(PagedAttention(p, tokens, kv,
                               AttentionSplits{d_splits.get(), d_bases.get(), d_po.get(), d_pml.get()},
                               stream),
                cudaSuccess);
    };

    const int ms = DecodeMaxSplits(bc.rows, kv_heads, sm);
    const double new_us = MedianUs(stream, 10, 60, [&](int i) { run_new(i, ms); });
    const double new_graph = GraphUs(stream, layers, [&](int i) { run_new(i, ms); });
    const double old_us = MedianUs(stream, 10, 60, run_old);
    const double old_graph = GraphUs(stream, layers, run_old);
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    CUDA_ASSERT(cudaGetLastError());
    // Cross-check the two kernels on copy 0, layer 0.
    dev.out.Poison();
    old_out.Poison();
    CUDA_ASSERT(cudaDeviceSynchronize());
    run_new(0, ms);
    run_old(0);
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    const size_t n = static_cast<size_t>(bc.rows) * heads * head_dim;
    const std::vector<uint16_t> a = dev.out.Download(), b = old_out.Download();
    const double diff =
        RelativeError(ToF32<bf16>(std::vector<uint16_t>(a.begin(), a.begin() + n)),
                      ToF32<bf16>(std::vector<uint16_t>(b.begin(), b.begin() + n)));
    EXPECT_LT(diff, Tolerance<bf16>());
    auto tbs = [&](double us) { return kv_bytes / (us * 1e-6) / 1e12; };
    std::printf("[decode-bench] %s rows=%d ctx=%d..%d KV=%.1fMB max_splits=%d | new stream %.2f us "
                "%.2f TB/s, graph %.2f us %.2f TB/s | old stream %.2f us %.2f TB/s, graph %.2f us "
                "%.2f TB/s (old split_tokens %d) | speedup graph %.2fx | new-vs-old rel %.1e\n",
                bc.name, bc.rows, bc.ctx_lo, bc.ctx_hi, kv_bytes / 1e6, ms, new_us, tbs(new_us),
                new_graph, tbs(new_graph), old_us, tbs(old_us), old_graph, tbs(old_graph),
                plan.split_tokens, old_graph / new_graph, diff);
    for (int s : bc.sweep) {
      const double us = MedianUs(stream, 5, 40, [&](int i) { run_new(i, s); });
      const double gus = GraphUs(stream, layers, [&](int i) { run_new(i, s); });
      std::printf("[decode-bench] %s sweep max_splits=%3d: stream %.2f us %.2f TB/s, graph %.2f us "
                  "%.2f TB/s\n",
                  bc.name, s, us, tbs(us), gus, tbs(gus));
    }
    std::fflush(stdout);
    CUDA_ASSERT(cudaStreamSynchronize(stream));
    CUDA_ASSERT(cudaGetLastError());
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvtier::cuda
