// Prefill attention on cuDNN: the run-time loading of libcudnn (why it cannot load, and the
// real library where the CUDA toolkit has it), the plan's key buckets, the paged-KV gather
// against a host gather (bf16 and fp8 KV), and CudnnPrefill against the host reference on
// identical data (bf16 and fp8 KV, causal with cached context, GQA, block boundaries, short
// and long chunks), with the refusal of a context longer than its scratch. GPU tests skip
// without a device, cuDNN tests without cuDNN (KVTIER_CUDNN_LIBRARY, else libcudnn.so.9 on the
// library path).
#include <cuda_runtime.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/cudnn_library.h"
#include "backend/cuda/cudnn_prefill.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/kv_gather.h"
#include "backend/kv_layout.h"
#include "common/fp8_e4m3.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model/tensor.h"
#include "prefill_pool.h"
#include "prefill_world.h"

namespace kvtier::cuda {
namespace {

using cuda_test::DeviceArray;
using cuda_test::DevicePool;
using cuda_test::GatherCase;
using cuda_test::MakePool;
using cuda_test::Pool;
using cuda_test::PrefillWorld;
using cuda_test::RelativeError;
using cuda_test::ToF32;
using cuda_test::Tolerance;

TEST(CudnnLibraryTest, SaysWhyItCannotLoad) {
  auto absent = CudnnLibrary::Load("/nonexistent/dir/libcudnn.so.9");
  ASSERT_FALSE(absent.ok());
  EXPECT_TRUE(absl::IsNotFound(absent.status())) << absent.status();
  EXPECT_NE(absent.status().message().find("/nonexistent/dir/libcudnn.so.9"), std::string::npos) << absent.status();
  EXPECT_NE(absent.status().message().find("KVTIER_CUDNN_LIBRARY"), std::string::npos) << absent.status();

  EXPECT_TRUE(absl::IsInvalidArgument(CudnnLibrary::Load("").status()));

  // A library that loads but is not cuDNN: the first symbol it lacks is named.
  auto not_cudnn = CudnnLibrary::Load("libm.so.6");
  ASSERT_FALSE(not_cudnn.ok());
  EXPECT_TRUE(absl::IsUnimplemented(not_cudnn.status())) << not_cudnn.status();
  EXPECT_NE(not_cudnn.status().message().find("has no symbol cudnnGetVersion"), std::string::npos)
      << not_cudnn.status();
}

TEST(CudnnLibraryTest, PathComesFromTheEnvironment) {
  const char* saved = getenv(CudnnLibrary::kPathVariable);
  const std::string restore = saved != nullptr ? saved : "";
  setenv(CudnnLibrary::kPathVariable, "/opt/x/libcudnn.so.9", 1);
  EXPECT_EQ(CudnnLibrary::PathFromEnvironment(), "/opt/x/libcudnn.so.9");
  setenv(CudnnLibrary::kPathVariable, "", 1);
  EXPECT_EQ(CudnnLibrary::PathFromEnvironment(), CudnnLibrary::kDefaultFile);
  unsetenv(CudnnLibrary::kPathVariable);
  EXPECT_EQ(CudnnLibrary::PathFromEnvironment(), CudnnLibrary::kDefaultFile);
  if (saved != nullptr) setenv(CudnnLibrary::kPathVariable, restore.c_str(), 1);
}

// The CUDA toolkit's own cuDNN, where it has one (no GPU needed to load it).
TEST(CudnnLibraryTest, LoadsTheToolkitsCudnnAndReportsItsVersion) {
  const std::string path = KVTIER_TEST_CUDNN_PATH;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no cuDNN at " << path;
  auto library = CudnnLibrary::Load(path);
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_GE((*library)->version(), CudnnLibrary::kMinVersion);
  EXPECT_EQ((*library)->version() / 10000, 9u);
  EXPECT_EQ((*library)->VersionString().rfind("9.", 0), 0u) << (*library)->VersionString();
  EXPECT_EQ((*library)->path(), path);
  char message[64] = {0};
  (*library)->api().GetLastErrorString(message, sizeof(message));  // callable through the table
}

TEST(CudnnAttentionTest, PlanKeysArePowersOfTwoUpToTheLongestContext) {
  EXPECT_EQ(CudnnAttention::PlanKeys(0, 0), 0);
  EXPECT_EQ(CudnnAttention::PlanKeys(1, 0), 64);
  EXPECT_EQ(CudnnAttention::PlanKeys(64, 0), 64);
  EXPECT_EQ(CudnnAttention::PlanKeys(65, 0), 128);
  EXPECT_EQ(CudnnAttention::PlanKeys(1000, 0), 1024);
  EXPECT_EQ(CudnnAttention::PlanKeys(1025, 0), 2048);
  EXPECT_EQ(CudnnAttention::PlanKeys(32768, 0), 32768);
  EXPECT_EQ(CudnnAttention::PlanKeys(32769, 0), 65536);
  // The last bucket is the longest context's, rounded up to 64.
  EXPECT_EQ(CudnnAttention::PlanKeys(32769, 40000), 40000);
  EXPECT_EQ(CudnnAttention::PlanKeys(32769, 40001), 40064);
  EXPECT_EQ(CudnnAttention::PlanKeys(16000, 40001), 16384);
  EXPECT_EQ(CudnnAttention::PlanKeys(40001, 40001), 40064);
  // A context past the bound still gets keys >= skv (the prefill refuses it by the scratch).
  EXPECT_EQ(CudnnAttention::PlanKeys(50000, 40001), 50048);
  for (const int64_t max_keys : {int64_t{0}, int64_t{131072}, int64_t{100000}}) {
    int64_t last = 0, buckets = 0;
    for (int64_t skv = 1; skv <= (max_keys > 0 ? max_keys : 131072); ++skv) {
      const int64_t keys = CudnnAttention::PlanKeys(skv, max_keys);
      ASSERT_GE(keys, skv);
      ASSERT_LE(keys, std::max<int64_t>(64, 2 * skv)) << skv;
      ASSERT_GE(keys, last);
      if (keys != last) ++buckets;
      last = keys;
    }
    EXPECT_LE(buckets, 12) << max_keys;  // 64 .. 131072: W4's 32k prompt builds at most 6
  }
}

class KvGatherTest : public cuda_test::CudaParamTest<GatherCase> {};

// Every chunk's K and V of layer 1, padded to its plan's keys, bit for bit the host's gather
// of the same values (fp8: dequantized with the row's scale and rounded to bf16).
TEST_P(KvGatherTest, MatchesHostGather) {
  const GatherCase g = GetParam();
  PrefillWorld w(g.heads, g.kv_heads, g.head_dim, g.block_tokens, {{1, 0}, {37, 100}, {600, 1037}, {16, 48}}, rng_);
  const int layer = 1;
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8 KV" : "bf16 KV");
    const Pool pool = MakePool(w, fp8, rng_);
    DevicePool device(w, pool, fp8);
    for (const PrefillChunk& c : w.prefill_chunks) {
      const int64_t skv = c.start_position + c.num_tokens, keys = CudnnAttention::PlanKeys(skv, 0);
      const size_t n = static_cast<size_t>(keys) * g.kv_heads * g.head_dim;
      DeviceArray<uint16_t> k(n), v(n);
      KvGatherParams params;
      params.chunk = c.chunk;
      params.layer = layer;
      params.num_positions = skv;
      params.padded_positions = keys;
      params.k_out = reinterpret_cast<bf16*>(k.get());
      params.v_out = reinterpret_cast<bf16*>(v.get());
      ASSERT_EQ(KvGather(params, device.kv, nullptr), cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      for (int side = 0; side < 2; ++side) {
        std::vector<uint16_t> want(n, 0);
        const std::vector<int32_t>& table = w.tables[c.chunk];
        for (int64_t p = 0; p < skv; ++p) {
          for (int h = 0; h < g.kv_heads; ++h) {
            for (int e = 0; e < g.head_dim; ++e) {
              const float x = pool.values[table[p / g.block_tokens] * w.layout.ElementsPerBlock() +
                                          w.layout.ElementOffset(layer, side, h, p % g.block_tokens) + e];
              want[(p * g.kv_heads + h) * g.head_dim + e] = FloatToBf16(x);
            }
          }
        }
        EXPECT_EQ((side == 0 ? k : v).Download(), want) << "chunk " << c.chunk << (side == 0 ? " K" : " V");
      }
    }
  }
}

// Checked on the host before any launch (the outputs are never written: no device needed).
TEST(KvGatherArgsTest, RejectsWhatItCannotGather) {
  bf16 unused[8];
  KvGatherParams params;
  params.num_positions = 4;
  params.padded_positions = 4;
  params.k_out = unused;
  params.v_out = unused;
  PagedKv<bf16> kv;
  kv.num_kv_heads = 1;
  kv.block_tokens = 16;
  kv.head_dim = 96;  // not a layout the fast kernels read
  EXPECT_EQ(KvGather(params, kv, nullptr), cudaErrorInvalidValue);
  kv.head_dim = 64;
  params.padded_positions = 3;  // fewer rows than positions
  EXPECT_EQ(KvGather(params, kv, nullptr), cudaErrorInvalidValue);
  params.padded_positions = 4;
  params.v_out = nullptr;
  EXPECT_EQ(KvGather(params, kv, nullptr), cudaErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvGatherTest,
                         ::testing::Values(GatherCase{8, 2, 128, 16}, GatherCase{4, 4, 64, 8},
                                           GatherCase{32, 8, 128, 32}),
                         [](const ::testing::TestParamInfo<GatherCase>& info) {
                           const GatherCase& c = info.param;
                           return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
                                  std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens);
                         });

// The process's cuDNN (KVTIER_CUDNN_LIBRARY, else libcudnn.so.9 on the library path), or a
// skip saying why there is none.
#define KVT_CUDNN_OR_SKIP(library)                                               \
  KVT_SKIP_WITHOUT_CUDA();                                                       \
  absl::StatusOr<const CudnnLibrary*> library##_or = CudnnLibrary::Shared();     \
  if (!library##_or.ok()) GTEST_SKIP() << library##_or.status().message();       \
  const CudnnLibrary& library = **library##_or

class CudnnPrefillTest : public cuda_test::CudaParamTest<GatherCase> {};

// A step's chunks for the CudnnPrefill tests: short ones off the block grid, one of exactly a
// block, prefix hits and later chunks deep into the context, a long one.
PrefillWorld StepWorld(const GatherCase& g, std::mt19937& rng) {
  return PrefillWorld(g.heads, g.kv_heads, g.head_dim, g.block_tokens,
                      {{2, 0}, {3, 5}, {16, 0}, {17, 100}, {100, 1000}, {600, 1037}, {64, 64}, {2048, 0}, {700, 3300}},
                      rng);
}

CudnnPrefill::Options StepOptions(const GatherCase& g) {
  CudnnPrefill::Options options;
  options.num_heads = g.heads;
  options.num_kv_heads = g.kv_heads;
  options.head_dim = g.head_dim;
  options.max_context = 4096;
  return options;
}

struct ChunkError {
  double relative = 0, max_abs = 0;
};

// Layer 1 of the world's chunks through `prefill` on `pool`, each chunk's output against the
// host reference on the pool's values: its relative error and largest absolute one.
std::vector<ChunkError> RunAgainstReference(CudnnPrefill& prefill, const PrefillWorld& w, const Pool& pool,
                                            const DevicePool& device, const cuda_test::Data16& q) {
  const int layer = 1;
  DeviceArray<uint16_t> d_q(q.bits.size()), d_out(q.bits.size());
  d_q.Upload(q.bits);
  const std::vector<float> ref = cuda_test::ReferenceAttention(w, pool.values, q.values, layer);
  EXPECT_TRUE(prefill.PrepareStep(w.prefill_chunks)) << prefill.Describe("own");
  d_out.Poison();
  const absl::Status run = prefill.EnqueueLayer(w.prefill_chunks, layer, reinterpret_cast<const bf16*>(d_q.get()),
                                                reinterpret_cast<bf16*>(d_out.get()), device.kv);
  EXPECT_TRUE(run.ok()) << run;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> out = ToF32<bf16>(d_out.Download());
  const size_t row = static_cast<size_t>(w.num_heads) * w.layout.head_dim;
  std::vector<ChunkError> errors;
  for (const PrefillChunk& c : w.prefill_chunks) {
    const std::vector<float> got(out.begin() + c.token_begin * row, out.begin() + (c.token_begin + c.num_tokens) * row);
    const std::vector<float> want(ref.begin() + c.token_begin * row, ref.begin() + (c.token_begin + c.num_tokens) * row);
    ChunkError e;
    for (size_t i = 0; i < got.size(); ++i) e.max_abs = std::max(e.max_abs, static_cast<double>(std::fabs(got[i] - want[i])));
    e.relative = RelativeError(got, want);
    errors.push_back(e);
  }
  return errors;
}

// Every chunk of a step through CudnnPrefill, against the host reference on the same values,
// for bf16 and fp8 KV.
TEST_P(CudnnPrefillTest, MatchesReference) {
  KVT_CUDNN_OR_SKIP(library);
  const GatherCase g = GetParam();
  PrefillWorld w = StepWorld(g, rng_);
  DeviceMemoryAccount memory(0);
  const CudnnPrefill::Options options = StepOptions(g);
  auto prefill = CudnnPrefill::Create(library, options, nullptr, memory);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_EQ(memory.buffer_bytes(), CudnnPrefill::ScratchBytes(options));
  const cuda_test::Data16 q = cuda_test::Random16<bf16>(w.QElements(), rng_, -2, 2);
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8 KV" : "bf16 KV");
    const Pool pool = MakePool(w, fp8, rng_);
    DevicePool device(w, pool, fp8);
    const std::vector<ChunkError> errors = RunAgainstReference(**prefill, w, pool, device, q);
    for (size_t i = 0; i < errors.size(); ++i) {
      const PrefillChunk& c = w.prefill_chunks[i];
      EXPECT_LT(errors[i].relative, Tolerance<bf16>())
          << "chunk " << c.chunk << " start " << c.start_position << " tokens " << c.num_tokens;
      EXPECT_LT(errors[i].max_abs, 3e-2) << "chunk " << c.chunk;
    }
  }
  EXPECT_EQ((*prefill)->Describe("wgmma").rfind("cudnn " + library.VersionString() + " (", 0), 0u)
      << (*prefill)->Describe("wgmma");
  // One plan per (chunk length, key bucket), built for the bf16 pass and reused by the fp8 one.
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const PrefillChunk& c : w.prefill_chunks) {
    shapes.insert({c.num_tokens, CudnnAttention::PlanKeys(c.start_position + c.num_tokens, options.max_context)});
  }
  EXPECT_EQ((*prefill)->plans_built(), static_cast<int64_t>(shapes.size()));
}

// cuDNN's fp8 attention over an fp8 pool (Options::fp8_attention): the same chunks against the
// host reference on the pool's values, within what E4M3 queries, requantized keys and values,
// E4M3 probabilities and an E4M3 output allow (each about 2^-4 relative); a bf16 pool is
// refused, and a chunk
// longer than the queries' scratch goes to the backend's kernel.
TEST_P(CudnnPrefillTest, Fp8AttentionMatchesReference) {
  KVT_CUDNN_OR_SKIP(library);
  const GatherCase g = GetParam();
  PrefillWorld w = StepWorld(g, rng_);
  DeviceMemoryAccount memory(0);
  CudnnPrefill::Options options = StepOptions(g);
  options.fp8_attention = true;
  options.max_chunk_tokens = 2048;
  auto prefill = CudnnPrefill::Create(library, options, nullptr, memory);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_EQ(memory.buffer_bytes(), CudnnPrefill::ScratchBytes(options));
  const cuda_test::Data16 q = cuda_test::Random16<bf16>(w.QElements(), rng_, -2, 2);
  const Pool pool = MakePool(w, true, rng_);
  DevicePool device(w, pool, true);
  const std::vector<ChunkError> errors = RunAgainstReference(**prefill, w, pool, device, q);
  for (size_t i = 0; i < errors.size(); ++i) {
    const PrefillChunk& c = w.prefill_chunks[i];
    EXPECT_LT(errors[i].relative, 0.08) << "chunk " << c.chunk << " start " << c.start_position << " tokens "
                                        << c.num_tokens;
    EXPECT_LT(errors[i].max_abs, 0.25) << "chunk " << c.chunk;
    std::printf("fp8 attention, chunk %d (%d tokens at %lld): relative error %.4f, max abs %.4f\n", c.chunk,
                c.num_tokens, static_cast<long long>(c.start_position), errors[i].relative, errors[i].max_abs);
  }
  const std::string describe = (*prefill)->Describe("wgmma");
  EXPECT_EQ(describe.rfind("cudnn " + library.VersionString() + " (fp8 Q, K, V and O; ", 0), 0u) << describe;
  const Pool bf16_pool = MakePool(w, false, rng_);
  DevicePool bf16_device(w, bf16_pool, false);
  DeviceArray<uint16_t> d_q(q.bits.size()), d_out(q.bits.size());
  EXPECT_TRUE(absl::IsFailedPrecondition((*prefill)->EnqueueLayer(
      w.prefill_chunks, 1, reinterpret_cast<const bf16*>(d_q.get()), reinterpret_cast<bf16*>(d_out.get()),
      bf16_device.kv)));
  const std::vector<PrefillChunk> too_long = {{0, 0, 2049, 0}};
  EXPECT_FALSE((*prefill)->PrepareStep(too_long));
  EXPECT_NE((*prefill)->Describe("wgmma").find("a chunk of 2049 tokens is longer than the fp8 queries' scratch's 2048"),
            std::string::npos)
      << (*prefill)->Describe("wgmma");
  prefill->reset();  // its scratch goes back to the account (the backend's fallback relies on it)
  EXPECT_EQ(memory.buffer_bytes(), 0);
}

// The plan cache keeps at most max_plans, dropping the least recently used.
TEST(CudnnAttentionCacheTest, DropsTheLeastRecentlyUsedPlan) {
  KVT_CUDNN_OR_SKIP(library);
  DeviceMemoryAccount memory(0);
  auto workspace = memory.Allocate(CudnnPrefill::kWorkspaceBytes, "workspace");
  ASSERT_TRUE(workspace.ok()) << workspace.status();
  CudnnAttention::Options options;
  options.num_heads = 8;
  options.num_kv_heads = 2;
  options.head_dim = 128;
  options.max_plans = 2;
  auto attention = CudnnAttention::Create(library, options, nullptr, *workspace, CudnnPrefill::kWorkspaceBytes);
  ASSERT_TRUE(attention.ok()) << attention.status();
  CudnnAttention& a = **attention;
  ASSERT_TRUE(a.Prepare(64, 64).ok());
  ASSERT_TRUE(a.Prepare(64, 60 + 64).ok());  // keys 128
  EXPECT_EQ(a.plans_built(), 2);
  ASSERT_TRUE(a.Prepare(64, 100).ok());  // keys 128: the same bucket, cached
  ASSERT_TRUE(a.Prepare(64, 64).ok());   // cached, now the most recent
  EXPECT_EQ(a.plans_built(), 2);
  ASSERT_TRUE(a.Prepare(32, 64).ok());  // a third shape drops (64, 128)
  EXPECT_EQ(a.plans_built(), 3);
  ASSERT_TRUE(a.Prepare(64, 64).ok());
  EXPECT_EQ(a.plans_built(), 3);
  ASSERT_TRUE(a.Prepare(64, 128).ok());  // built again
  EXPECT_EQ(a.plans_built(), 4);
  EXPECT_TRUE(absl::IsInvalidArgument(a.Prepare(65, 64)));  // more queries than keys
  EXPECT_TRUE(absl::IsInvalidArgument(a.Run(nullptr, nullptr, nullptr, nullptr, 64, 64, 1.0f)));
}

// The options of the plan tests: 8 query heads over 2 KV heads of 128.
CudnnPrefill::Options EightHeadsOverTwo(int64_t max_context) {
  CudnnPrefill::Options options;
  options.num_heads = 8;
  options.num_kv_heads = 2;
  options.head_dim = 128;
  options.max_context = max_context;
  return options;
}

// Warm-up builds one plan per key bucket a long prompt's chunks reach, and the chunks then
// find them: 256-query chunks over up to 3,000 keys are buckets 256, 512, 1024, 2048 and
// the last, 3,008 (3,000 rounded up to 64).
TEST(CudnnPrefillPlansTest, BuildPlansForChunksCoversEveryBucketOfALongPrompt) {
  KVT_CUDNN_OR_SKIP(library);
  DeviceMemoryAccount memory(0);
  CudnnPrefill::Options options = EightHeadsOverTwo(3000);
  auto prefill = CudnnPrefill::Create(library, options, nullptr, memory);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  (*prefill)->BuildPlansForChunks(256);
  EXPECT_EQ((*prefill)->plans_built(), 5);
  std::vector<PrefillChunk> chunks(1);
  for (int64_t start = 0; start + 256 <= 3000; start += 256) {
    chunks[0].start_position = start;
    chunks[0].num_tokens = 256;
    ASSERT_TRUE((*prefill)->PrepareStep(chunks)) << (*prefill)->Describe("own");
  }
  EXPECT_EQ((*prefill)->plans_built(), 5);  // every chunk's plan was built at warm-up
}

// With min_chunk_tokens and min_context, a step with a shorter chunk, or one ending early in
// the context, goes to the backend's kernel without a plan or a refusal, and Describe counts
// it; full chunks deep enough still run on cuDNN.
TEST(CudnnPrefillPlansTest, ShortChunksRunOnTheBackendsKernel) {
  KVT_CUDNN_OR_SKIP(library);
  DeviceMemoryAccount memory(0);
  CudnnPrefill::Options options = EightHeadsOverTwo(1024);
  options.min_chunk_tokens = 256;
  options.min_context = 512;
  auto prefill = CudnnPrefill::Create(library, options, nullptr, memory);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  const std::vector<PrefillChunk> short_and_full = {{0, 0, 256, 0}, {1, 256, 100, 0}};
  EXPECT_FALSE((*prefill)->PrepareStep(short_and_full));
  EXPECT_EQ((*prefill)->plans_built(), 0);
  EXPECT_EQ((*prefill)->Describe("wgmma"), "wgmma (1 steps with chunks under 256 tokens or 512 positions on wgmma)");
  const std::vector<PrefillChunk> full_but_early = {{0, 0, 256, 255}};  // ends at 511
  EXPECT_FALSE((*prefill)->PrepareStep(full_but_early));
  const std::vector<PrefillChunk> full = {{0, 0, 256, 256}};
  EXPECT_TRUE((*prefill)->PrepareStep(full));
  const std::string both = (*prefill)->Describe("wgmma");
  EXPECT_EQ(both.rfind("cudnn " + library.VersionString() + " and wgmma (1 plans built in ", 0), 0u) << both;
  EXPECT_NE(both.find("; 2 steps with chunks under 256 tokens or 512 positions on wgmma)"), std::string::npos) << both;
  EXPECT_EQ((*prefill)->steps_refused(), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnPrefillTest,
                         ::testing::Values(GatherCase{8, 2, 128, 16},   // Llama-3 GQA 4
                                           GatherCase{32, 8, 128, 16},  // Llama-3-8B's heads
                                           GatherCase{4, 4, 64, 8},     // MHA, head_dim 64, blocks of 8
                                           GatherCase{14, 2, 128, 32}), // group 7, blocks of 32
                         [](const ::testing::TestParamInfo<GatherCase>& info) {
                           const GatherCase& c = info.param;
                           return "h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "d" +
                                  std::to_string(c.head_dim) + "bt" + std::to_string(c.block_tokens);
                         });

// A context longer than the scratch sends its step to the backend's kernel, and the reason
// is what Describe gives; a step that fits then runs on cuDNN again.
TEST(CudnnPrefillRefusalTest, ContextLongerThanTheScratchIsRefused) {
  KVT_CUDNN_OR_SKIP(library);
  DeviceMemoryAccount memory(0);
  CudnnPrefill::Options options = EightHeadsOverTwo(256);
  auto prefill = CudnnPrefill::Create(library, options, nullptr, memory);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  const std::vector<PrefillChunk> too_long = {{0, 0, 64, 1000}};
  EXPECT_FALSE((*prefill)->PrepareStep(too_long));
  EXPECT_EQ((*prefill)->Describe("wgmma"),
            "wgmma (cuDNN refused 1 steps: a context of 1064 positions is longer than the scratch's 256)");
  const std::vector<PrefillChunk> fits = {{0, 0, 64, 100}};
  EXPECT_TRUE((*prefill)->PrepareStep(fits));
  const std::string both = (*prefill)->Describe("wgmma");
  EXPECT_EQ(both.rfind("cudnn " + library.VersionString() + " and wgmma (1 plans built in ", 0), 0u) << both;
  EXPECT_NE(both.find("; cuDNN refused 1 steps: a context of 1064"), std::string::npos) << both;
}

TEST(CudnnPrefillArgsTest, RejectsShapesItDoesNotTake) {
  KVT_CUDNN_OR_SKIP(library);
  DeviceMemoryAccount memory(0);
  CudnnPrefill::Options options;
  options.num_heads = 8;
  options.num_kv_heads = 2;
  options.head_dim = 96;
  options.max_context = 256;
  EXPECT_TRUE(absl::IsInvalidArgument(CudnnPrefill::Create(library, options, nullptr, memory).status()));
  options.head_dim = 128;
  options.num_kv_heads = 3;
  EXPECT_TRUE(absl::IsInvalidArgument(CudnnPrefill::Create(library, options, nullptr, memory).status()));
  EXPECT_EQ(memory.buffer_bytes(), 0);
}

}  // namespace
}  // namespace kvtier::cuda
