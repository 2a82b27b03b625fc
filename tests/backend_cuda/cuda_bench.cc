// Times CudaBackend prefill and decode steps on a real model shape with random weights
// generated on the device (no checkpoint on disk). Usage: kvtier_cuda_bench [preset].
// Prints one line per case: median ms per step and tokens/s. Not a test.
// KVTIER_BENCH_PROFILE=w1|w2|w4: only that decode case, one graph step between
// cudaProfilerStart/Stop (for `ncu --profile-from-start off`), nothing else; w4p: likewise one
// prefill chunk of W4's (2,048 tokens at 30,000 positions); w6p: W6's prefill step (16 prompts
// of 128 own tokens over one shared, cached 4,096-token prefix).
// KVTIER_BENCH_PREFILL=1: only the prefill steps (W1's 512, W2's 64 x 512, W6's step, one
// 2,048-token prompt from position 0 and W4's chunk at 30,000), eager, each reported in ms and
// tokens/s.
// KVTIER_DECODE_BENCH=1: only the decode attention kernel's timings (decode_attention_bench.h).
// KVTIER_BENCH_QUICK=1: only W1/W2 graph decode steps and W2's prefill; =w1: only W1's.
// KVTIER_BENCH_W9=ROWS:CTX[,ROWS:CTX...]: only W9-shaped steps (bench_w9.h): graph decode
// steps of ROWS sequences at CTX positions, and mixed steps (ROWS decodes plus one prompt
// chunk that fills 2,048 tokens), as a saturated server runs them.
// KVTIER_SKINNY_TMA=ROW_BYTES,PROMOTION,HINTS[,LOOKAHEAD]: the skinny TMA pipeline's tuning.
// KVTIER_BENCH_WEIGHT_DTYPE=fp8 / KVTIER_BENCH_KV_DTYPE=fp8: fp8 weights / fp8 KV cache.
// Prompts are random token ids (a fixed seed), each sequence its own, so that a mixture of
// experts routes a prompt's tokens over its experts as a real prompt does; a prompt of one
// repeated token routes every row to the same top-k experts (its rows stay identical through
// every layer), which reads a fraction of the weights. KVTIER_BENCH_SAME_TOKENS=1 runs that
// repeated token, as this bench did before, to compare with older records.
// The backend's switches come from the same KVTIER_CUDA_* variables as the kvtier CLI's
// (README.md, "Diagnostics").
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda_options.h"
#include "decode_attention_bench.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

// KVTIER_CUDA_GRAPHS, _FAST_ATTENTION, _PDL and _PDL_EARLY turn their switch off when they
// start with '0'; KVTIER_CUDA_GEMV_PREFETCH=2|4|8 (rounded down; below 2: 2);
// KVTIER_CUDA_SKINNY=0..3 (cuda_skinny_gemm); KVTIER_CUDA_DECODE_FP8_PAIR=0|1|2;
// KVTIER_CUDA_GEMV_BULK=0|1, KVTIER_CUDA_MOE_DOWN_BULK=0|1, KVTIER_CUDA_MOE_SKINNY=0|1 and
// KVTIER_CUDA_L2_PREFETCH=0..3
// (CudaLaunchOptions). As the CLI's cuda_env.cc reads them, for scripts that set them for both
// programs.
CudaOptions CudaOptionsFromEnvironment() {
  auto off = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] == '0';
  };
  CudaOptions options;
  options.decode_graphs = !off("KVTIER_CUDA_GRAPHS");
  options.fast_attention = !off("KVTIER_CUDA_FAST_ATTENTION");
  options.launch.pdl = !off("KVTIER_CUDA_PDL");
  options.launch.pdl_early_trigger = !off("KVTIER_CUDA_PDL_EARLY");
  if (const char* value = std::getenv("KVTIER_CUDA_SKINNY"); value != nullptr) {
    options.skinny_gemm = std::clamp(std::atoi(value), 0, 3);
  }
  if (const char* value = std::getenv("KVTIER_CUDA_GEMV_PREFETCH"); value != nullptr) {
    const int pieces = std::atoi(value);
    options.launch.gemv_prefetch = pieces >= 8 ? 8 : pieces >= 4 ? 4 : 2;
  }
  if (const char* value = std::getenv("KVTIER_CUDA_DECODE_FP8_PAIR"); value != nullptr) {
    options.launch.decode_fp8_pair_tiles = value[0] == '0' ? 0 : value[0] == '2' ? 2 : 1;
  }
  if (const char* value = std::getenv("KVTIER_CUDA_GEMV_BULK"); value != nullptr) {
    options.launch.gemv_bulk = value[0] == '0' ? 0 : 1;
  }
  if (const char* value = std::getenv("KVTIER_CUDA_MOE_DOWN_BULK"); value != nullptr) {
    options.launch.moe_down_bulk = value[0] == '0' ? 0 : 1;
  }
  if (const char* value = std::getenv("KVTIER_CUDA_MOE_SKINNY"); value != nullptr) {
    options.launch.moe_skinny = value[0] == '0' ? 0 : 1;
  }
  if (const char* value = std::getenv("KVTIER_CUDA_L2_PREFETCH"); value != nullptr) {
    options.launch.l2_prefetch = std::clamp(std::atoi(value), 0, 3);
  }
  return options;
}

double MedianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The decode GEMVs of one layer (and the LM head) alone, one row, weights rotated through a
// 4 GiB buffer so they come from HBM as in a real step: achieved bandwidth per shape.
void TimeGemvShapes(const ModelConfig& c, const CudaLaunchOptions& launch) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const int64_t qkv = c.q_dim() + 2 * c.kv_dim();
  struct Shape {
    const char* name;
    int64_t n, k;
  } shapes[] = {{"qkv", qkv, h}, {"o", h, c.q_dim()}, {"gate_up", 2 * inter, h},
                {"down", h, inter}, {"lm_head", c.vocab_size, h}};
  const size_t buffer_bytes = size_t{4} << 30;
  cuda::bf16* w = nullptr;
  cuda::bf16* x = nullptr;
  void* out = nullptr;
  cublasHandle_t cublas = nullptr;
  if (cudaMalloc(&w, buffer_bytes) != cudaSuccess || cudaMalloc(&x, 64 * inter * 2) != cudaSuccess ||
      cudaMalloc(&out, 64 * c.vocab_size * 4) != cudaSuccess ||
      cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) {
    std::printf("gemv: allocation failed\n");
    return;
  }
  cuda::FillRandom(w, buffer_bytes / 2, 11, 0.0f, 0.05f, nullptr);
  cuda::FillRandom(x, 64 * inter, 12, 0.0f, 1.0f, nullptr);
  cudaEvent_t start, end;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  for (const Shape& s : shapes) {
    const size_t bytes = static_cast<size_t>(s.n * s.k * 2);
    const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(buffer_bytes / bytes));
    // The warp GEMV and cuBLAS at the batch sizes where one overtakes the other.
    enum Kind { kGemv, kCublas };
    static constexpr struct {
      Kind kind;
      int rows;
    } kVariants[] = {{kGemv, 1},   {kGemv, 2},   {kGemv, 4},   {kGemv, 8},
                     {kCublas, 2}, {kCublas, 4}, {kCublas, 8}, {kCublas, 64}};
    for (const auto& variant : kVariants) {
      const int rows = variant.rows;
      const bool f32 = s.n == c.vocab_size;
      std::vector<double> us;
      for (int i = 0; i < 60; ++i) {
        const cuda::bf16* wi = w + (i % copies) * s.n * s.k;
        cudaEventRecord(start, nullptr);
        if (variant.kind == kGemv) {
          cuda::GemvSmallRows(x, wi, rows, static_cast<int>(s.k), static_cast<int>(s.n), out,
                              f32, nullptr, launch);
        } else {  // what Projections::Gemm runs for larger batches
          const float alpha = 1.0f, beta = 0.0f;
          cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.n), rows,
                       static_cast<int>(s.k), &alpha, wi, CUDA_R_16BF, static_cast<int>(s.k), x,
                       CUDA_R_16BF, static_cast<int>(s.k), &beta, out,
                       f32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(s.n),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        }
        cudaEventRecord(end, nullptr);
        cudaEventSynchronize(end);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, end);
        if (i >= 10) us.push_back(ms * 1000.0);
      }
      const double med = MedianMs(us);
      std::printf("%-6s %-8s rows %2d  n %6lld k %6lld  %8.1f us  %6.2f TB/s\n",
                  variant.kind == kGemv ? "gemv" : "cublas", s.name, rows,
                  static_cast<long long>(s.n), static_cast<long long>(s.k), med,
                  bytes / (med * 1e-6) / 1e12);
    }
  }
  cublasDestroy(cublas);
  cudaFree(w);
  cudaFree(x);
  cudaFree(out);
}

int Main(int argc, char** argv) {
  BackendOptions options;
  options.cuda = CudaOptionsFromEnvironment();
  // KVTIER_SKINNY_TMA=ROW_BYTES,PROMOTION,HINTS[,LOOKAHEAD]: the TMA pipeline's tuning
  // (skinny_gemm.h).
  if (const char* value = std::getenv("KVTIER_SKINNY_TMA"); value != nullptr) {
    cuda::SkinnyTmaTuning tuning;
    int hints = 1;
    if (std::sscanf(value, "%d,%d,%d,%d", &tuning.code_row_bytes, &tuning.l2_promotion, &hints, &tuning.lookahead) >=
        3) {
      tuning.l2_hints = hints != 0;
      cuda::SetSkinnyTmaTuning(tuning);
    }
  }
  if (const char* v = std::getenv("KVTIER_DECODE_BENCH"); v != nullptr && std::string(v) == "1") {
    return cuda::TimeDecodeAttention(options.cuda.launch);
  }
  const std::string preset = argc > 1 ? argv[1] : "llama3-8b";
  auto spec = RandomCheckpointPreset(preset);
  if (!spec.ok()) return std::printf("%s\n", spec.status().ToString().c_str()), 1;
  auto config = RandomCheckpointConfig(*spec);
  if (!config.ok()) return std::printf("%s\n", config.status().ToString().c_str()), 1;
  // KVTIER_BENCH_DTYPE=f16: weights, activations and KV in fp16 (as an fp16 checkpoint runs).
  const char* dtype_env = std::getenv("KVTIER_BENCH_DTYPE");
  const bool f16 = dtype_env != nullptr && std::string(dtype_env) == "f16";
  // KVTIER_BENCH_WEIGHT_DTYPE=fp8: the projections as E4M3 codes + per-channel scales.
  const char* weight_env = std::getenv("KVTIER_BENCH_WEIGHT_DTYPE");
  const bool fp8 = weight_env != nullptr && std::string(weight_env) == "fp8";
  if (fp8) options.weight_dtype = StorageDType::kFp8;
  // KVTIER_BENCH_KV_DTYPE=fp8: the KV cache as E4M3 codes + one fp32 scale per row.
  const char* kv_env = std::getenv("KVTIER_BENCH_KV_DTYPE");
  const bool kv8 = kv_env != nullptr && std::string(kv_env) == "fp8";
  if (kv8) options.kv_dtype = StorageDType::kFp8;
  // W9 shapes: the pool holds every row at its context; the step as large as the engine's.
  std::vector<std::pair<int, int>> w9_cases;
  if (const char* v = std::getenv("KVTIER_BENCH_W9"); v != nullptr) {
    for (const char* c = v; *c != '\0';) {
      int rows = 0, ctx = 0, used = 0;
      if (std::sscanf(c, "%d:%d%n", &rows, &ctx, &used) != 2 || rows < 1 || ctx < 1) {
        return std::printf("KVTIER_BENCH_W9: expected ROWS:CTX[,ROWS:CTX...], got %s\n", v), 1;
      }
      w9_cases.emplace_back(rows, ctx);
      c += used;
      if (*c == ',') ++c;
    }
  }
  int64_t w9_pool_tokens = 0;
  for (const auto& [rows, ctx] : w9_cases) {
    w9_pool_tokens = std::max<int64_t>(w9_pool_tokens, static_cast<int64_t>(rows) * (ctx + 64) + 4096);
    options.max_sequences = std::max<int64_t>(options.max_sequences, rows + 1);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto created = CudaBackend::CreateWithRandomWeights(*config, options, 1,
                                                      f16 ? DType::kF16 : DType::kBF16);
  if (!created.ok()) return std::printf("%s\n", created.status().ToString().c_str()), 1;
  CudaBackend& b = **created;
  const int64_t bt = b.kv_layout().block_tokens;
  const int64_t num_blocks = w9_cases.empty() ? 64 * 1024 / bt + 32768 / bt + 64 : w9_pool_tokens / bt + 64;
  if (auto st = b.AllocateKvPool(num_blocks); !st.ok()) {
    return std::printf("%s\n", st.ToString().c_str()), 1;
  }
  void* pool = const_cast<void*>(b.BlockDevicePointer(0));
  const int64_t pool_elements = num_blocks * b.kv_layout().ElementsPerBlock();
  if (kv8) {
    // The bytes of random bf16 values over codes and scales alike: a few NaN codes and
    // scales of any magnitude, which change no timing (prefills rewrite what they read).
    cuda::FillRandom(static_cast<cuda::bf16*>(pool), static_cast<int64_t>(num_blocks * b.kv_layout().BlockBytes() / 2), 5,
                     0.0f, 1.0f, nullptr);
  } else if (f16) {
    cuda::FillRandom(static_cast<cuda::f16*>(pool), pool_elements, 5, 0.0f, 1.0f, nullptr);
  } else {
    cuda::FillRandom(static_cast<cuda::bf16*>(pool), pool_elements, 5, 0.0f, 1.0f, nullptr);
  }
  cudaDeviceSynchronize();
  const double setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("model %s (%s%s%s): %.2f GiB device memory (weights+workspace+KV), setup %.1f s\n",
              preset.c_str(), f16 ? "f16" : "bf16", fp8 ? ", fp8 weights" : "", kv8 ? ", fp8 KV" : "",
              b.device_bytes_in_use() / 1073741824.0, setup_s);

  std::vector<int32_t> tokens(32768, 7);
  if (const char* same = std::getenv("KVTIER_BENCH_SAME_TOKENS"); same == nullptr || std::string(same) != "1") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config->vocab_size) - 1);
    for (int32_t& t : tokens) t = id(rng);
  }
  // Sequence s's prompt and decode token: its own slice of `tokens`.
  auto prompt = [&](int s, int64_t n) { return std::span<const int32_t>(tokens).subspan(s * 512 % 32768, n); };
  // Sequence s owns blocks [s*blocks_per_seq, ...); the long sequence the last 2048+.
  const int64_t per_seq = 1024 / bt;
  std::vector<std::vector<int32_t>> tables(64);
  for (int s = 0; s < 64; ++s) {
    for (int64_t j = 0; j < per_seq; ++j) tables[s].push_back(static_cast<int32_t>(s * per_seq + j));
  }
  std::vector<int32_t> long_table;
  for (int64_t j = 0; j < 32768 / bt + 1; ++j) {
    long_table.push_back(static_cast<int32_t>(64 * per_seq + j));
  }

  // W6's prefill step: 16 prompts of 128 own tokens over one cached 4,096-token prefix (the
  // long sequence's first blocks), each prompt's own blocks those of tables[s], logits for each
  // prompt's last token, as the engine runs W6's batch at 2,048 tokens a step.
  ForwardBatch w6_step;
  std::vector<std::vector<int32_t>> w6_tables(16);  // sized first: the chunks keep spans of them
  for (int s = 0; s < 16; ++s) {
    w6_tables[s].assign(long_table.begin(), long_table.begin() + 4096 / bt);
    for (int64_t j = 0; j < (128 + bt - 1) / bt; ++j) w6_tables[s].push_back(tables[s][j]);
    w6_step.chunks.push_back({prompt(s, 128), 4096, w6_tables[s], true});
  }
  // W2's prefill (64 prompts of 512 tokens) and a prefill chunk of W4's (2,048 tokens at 30,000).
  ForwardBatch w2_prefill, w4_chunk;
  for (int s = 0; s < 64; ++s) {
    w2_prefill.chunks.push_back({prompt(s, 512), 0, tables[s], true});
  }
  w4_chunk.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 2048), 30000, long_table, true});

  // mode: greedy ids, logits to the host, or ids sampled on the device (T 0.8, top-k 50,
  // top-p 0.95: what a chat service would send).
  enum Mode { kGreedy, kLogits, kSampled };
  std::vector<RowSampling> sampling;
  auto time_batch = [&](const char* name, const ForwardBatch& batch, int reps, int64_t tokens_per_step,
                        Mode mode) {
    std::vector<double> ms;
    std::vector<float> logits;
    std::vector<int32_t> ids;
    sampling.assign(batch.chunks.size(), RowSampling{0.8f, 50, 0.95f, 0.0});
    for (int i = 0; i < reps + 2; ++i) {
      for (size_t j = 0; j < sampling.size(); ++j) {
        const double x = i * 0.618034 + j * 0.1;  // draws spread over [0, 1)
        sampling[j].u = x - std::floor(x);
      }
      const auto start = std::chrono::steady_clock::now();
      const absl::Status st = mode == kGreedy  ? b.ForwardGreedy(batch, &ids)
                              : mode == kLogits ? b.Forward(batch, &logits)
                                                : b.ForwardSampled(batch, sampling, &ids);
      const auto end = std::chrono::steady_clock::now();
      if (!st.ok()) {
        std::printf("%s: %s\n", name, st.ToString().c_str());
        return;
      }
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
    const double med = MedianMs(ms);
    std::printf("%-36s %9.3f ms/step %11.1f tokens/s\n", name, med, tokens_per_step * 1000.0 / med);
  };

  if (!w9_cases.empty()) {
    b.decode_graphs().set_enabled(true);
    for (const auto& [rows, ctx] : w9_cases) {
      const int64_t per_row = (ctx + 64 + bt - 1) / bt;
      std::vector<std::vector<int32_t>> w9_tables(rows);
      for (int r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < per_row; ++j) w9_tables[r].push_back(static_cast<int32_t>(r * per_row + j));
      }
      std::vector<int32_t> prompt_table;
      for (int64_t j = 0; j < 2048 / bt + 1; ++j) prompt_table.push_back(static_cast<int32_t>(rows * per_row + j));
      ForwardBatch decode;
      for (int r = 0; r < rows; ++r) {
        decode.chunks.push_back({prompt(r, 1), ctx, w9_tables[r], true});
      }
      char name[96];
      std::snprintf(name, sizeof name, "W9 decode, %d seqs at %d [graph]", rows, ctx);
      time_batch(name, decode, 10, rows, kGreedy);
      if (rows < 2048) {
        ForwardBatch mixed = decode;
        mixed.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 2048 - rows), 0, prompt_table, true});
        std::snprintf(name, sizeof name, "W9 mixed, %d decodes + %d prompt", rows, 2048 - rows);
        time_batch(name, mixed, 5, 2048, kGreedy);
      }
    }
    ForwardBatch prompts;  // tables[0], tables[1]: 1,024 positions (over W9 rows' blocks: timing only)
    for (int p = 0; p < 2; ++p) prompts.chunks.push_back({prompt(2 * p, 1024), 0, tables[p], true});
    time_batch("W9 prefill, 2 prompts x 1024", prompts, 5, 2048, kGreedy);
    return 0;
  }
  if (const char* which = std::getenv("KVTIER_BENCH_PROFILE"); which != nullptr) {
    const std::string w = which;
    ForwardBatch batch;
    const int rows = w == "w2" ? 64 : 1;
    if (w == "w4p") {
      batch = w4_chunk;
    } else if (w == "w6p") {
      batch = w6_step;
    } else {
      for (int s = 0; s < rows; ++s) {
        const bool long_ctx = w == "w4";
        batch.chunks.push_back({prompt(s, 1),
                                long_ctx ? 32767 : (rows == 1 ? 600 : 640),
                                long_ctx ? long_table : tables[s], true});
      }
    }
    std::vector<int32_t> ids;
    for (int i = 0; i < 3; ++i) {
      if (auto st = b.ForwardGreedy(batch, &ids); !st.ok()) return std::printf("%s\n", st.ToString().c_str()), 1;
    }
    cudaProfilerStart();
    const absl::Status st = b.ForwardGreedy(batch, &ids);
    cudaProfilerStop();
    std::printf("profiled one %s step (%s), graph replays %lld\n", w.c_str(),
                st.ok() ? "ok" : st.ToString().c_str(), static_cast<long long>(b.decode_graphs().replays()));
    return st.ok() ? 0 : 1;
  }
  // KVTIER_BENCH_QUICK=1: only the graph decode steps of W1 and W2 and W2's prefill (an A/B
  // of kernel switches in a few seconds per run); =w1: only W1's graph decode steps.
  const char* quick_value = std::getenv("KVTIER_BENCH_QUICK");
  const bool quick = quick_value != nullptr;
  const bool quick_w1 = quick && std::string(quick_value) == "w1";
  if (!quick_w1) {
    ForwardBatch batch;
    batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 512), 0, tables[0], true});
    time_batch("W1 prefill 512 (1 seq)", batch, 5, 512, kGreedy);
  }
  if (const char* v = std::getenv("KVTIER_BENCH_PREFILL"); v != nullptr && std::string(v) == "1") {
    time_batch("W2 prefill 64 x 512", w2_prefill, 3, 64 * 512, kGreedy);
    time_batch("W6 prefill step, 16 x 128 over 4096", w6_step, 5, 16 * 128, kGreedy);
    ForwardBatch one;  // the same 2,048 tokens as one prompt from position 0
    one.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 2048), 0, long_table, true});
    time_batch("prefill 2048 at 0 (1 seq)", one, 5, 2048, kGreedy);
    time_batch("W4 prefill chunk 2048 at 30000", w4_chunk, 3, 2048, kGreedy);
    return 0;
  }
  for (bool graphs : {false, true}) {
    if (quick && !graphs) continue;
    b.decode_graphs().set_enabled(graphs);
    const std::string suffix = graphs ? " [graph]" : " [eager]";
    {
      ForwardBatch batch;
      batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 1), 600, tables[0], true});
      time_batch(("W1 decode, 1 seq at 600" + suffix).c_str(), batch, 30, 1, kGreedy);
    }
    if (quick_w1) return 0;
    {
      ForwardBatch batch;
      for (int s = 0; s < 64; ++s) {
        batch.chunks.push_back({prompt(s, 1), 640, tables[s], true});
      }
      time_batch(("W2 decode, 64 seqs at 640" + suffix).c_str(), batch, 20, 64, kGreedy);
    }
    if (!quick) {
      ForwardBatch batch;
      batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 1), 32767, long_table, true});
      time_batch(("W4 decode, 1 seq at 32767" + suffix).c_str(), batch, 20, 1, kGreedy);
    }
  }
  if (!quick) {  // sampled decode: eager steps (graphs are captured for greedy steps only)
    ForwardBatch w1, w2;
    w1.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 1), 600, tables[0], true});
    for (int s = 0; s < 64; ++s) {
      w2.chunks.push_back({prompt(s, 1), 640, tables[s], true});
    }
    time_batch("W1 decode, 1 seq at 600 [sampled]", w1, 30, 1, kSampled);
    time_batch("W2 decode, 64 seqs at 640 [sampled]", w2, 20, 64, kSampled);
    // What sampling cost before: every logits row to the host (the host's sort not timed).
    time_batch("W2 decode, 64 seqs at 640 [logits out]", w2, 5, 64, kLogits);
  }
  if (!b.decode_graphs().error().empty()) std::printf("graphs turned off: %s\n", b.decode_graphs().error().c_str());
  time_batch("W2 prefill 64 x 512", w2_prefill, 2, 64 * 512, kGreedy);
  if (quick) return 0;
  time_batch("W4 prefill chunk 2048 at 30000", w4_chunk, 2, 2048, kGreedy);
  std::printf("allocations after init: %lld\n", static_cast<long long>(b.allocations_after_init()));
  TimeGemvShapes(*config, options.cuda.launch);
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
