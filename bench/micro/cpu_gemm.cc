// cpu_gemm: the CPU backend's prefill matrix products against library GEMMs, on the
// projection shapes of the demo model and Llama-3.2-1B, 512 activation rows, at 1 and 2
// threads; prints a table of GFLOP/s (2 x rows x out x in per product, best of the rounds)
// and one of each inexact product's error.
//
//   kvtier f16 / bf16: the exact 16-bit kernels (dot16.h, panels for many rows);
//   kvtier bf16x2: BF16 weights through vdpbf16ps, activations rounded to bf16
//     (dot16_bf16pairs.h; "-" where the processor has no AVX-512 BF16), the kernel alone;
//   kvtier bf16 best: what MatMul runs for BF16 on the best set: the vdpbf16ps kernel, or
//     oneDNN's matmul on the backend's threads and row-major weights where UsesOnednnBf16
//     (onednn_bf16.h) says so ("onednn" after the figure when it did);
//   kvtier q8_0: Q8_0 weights, activations quantized per block, the VNNI many-row kernel
//     (quant_gemm.h), the activation quantization included;
//   openblas sgemm: fp32 weights (a library GEMM needs them widened at load: twice the bytes);
//   onednn f32 / bf16 / s8: matmul primitives with the weights reordered at load into the
//     layout oneDNN picks; bf16 and s8 include rounding / quantizing the activations (s8:
//     one scale for all activations and one a weight row, not Q8_0's block scales, so not
//     the same numbers as the Q8_0 file: a bound on what an int8 library GEMM gives).
// kvtier's products run through MatMul (cpu_matrix.h) on the backend's thread pool;
// OpenBLAS on its own threads, oneDNN on OpenMP's, each set to the thread count.
//
// build: ninja -C build kvtier_cpu_gemm_bench (with libopenblas-dev and libdnnl-dev installed
// for their columns); run: build/bench/micro/kvtier_cpu_gemm_bench
// usage: kvtier_cpu_gemm_bench [--rows N] [--threads 1,2] [--models demo,1b] [--seconds S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/dot16.h"
#include "backend/cpu/onednn_bf16.h"
#include "common/thread_pool.h"
#include "model/block_quants.h"
#include "model/tensor.h"

#if defined(KVTIER_BENCH_OPENBLAS)
#include <cblas.h>
#endif
#if defined(KVTIER_BENCH_DNNL)
#include <omp.h>

#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace kvtier {
namespace {

struct Shape {
  const char* model;
  const char* name;
  int64_t out, in;
};

const Shape kShapes[] = {
    {"demo", "q/o 256x256", 256, 256},      {"demo", "k/v 128x256", 128, 256},
    {"demo", "gate/up 768x256", 768, 256},  {"demo", "down 256x768", 256, 768},
    {"1b", "q/o 2048x2048", 2048, 2048},    {"1b", "k/v 512x2048", 512, 2048},
    {"1b", "gate/up 8192x2048", 8192, 2048}, {"1b", "down 2048x8192", 2048, 8192},
};

struct Args {
  int64_t rows = 512;
  std::vector<int> threads = {1, 2};
  std::vector<std::string> models = {"demo", "1b"};
  double seconds = 0.3;
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    parts.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

// Best time of one call over rounds filling about `seconds` (at least three), after a warm-up.
double BestSeconds(const std::function<void()>& fn, double seconds) {
  fn();
  double best = 1e30, total = 0;
  for (int round = 0; round < 3 || total < seconds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, t);
    total += t;
  }
  return best;
}

// rms(got - want) / rms(want).
double RelativeRms(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-300));
}

CpuMatrix Matrix16(DType type, const std::vector<float>& w, int64_t out, int64_t in, const Dot16Kernels* kernels) {
  CpuMatrix m;
  m.dtype = type;
  m.rows = out;
  m.cols = in;
  m.dot16 = kernels;
  m.packed.resize(w.size() * sizeof(uint16_t));
  uint16_t* p = reinterpret_cast<uint16_t*>(m.packed.data());
  for (size_t i = 0; i < w.size(); ++i) p[i] = type == DType::kBF16 ? FloatToBf16(w[i]) : FloatToFp16(w[i]);
  return m;
}

#if defined(KVTIER_BENCH_DNNL)
// A oneDNN matmul out(rows, n) = x(rows, k) * w(n, k)^T with the weights reordered once.
class DnnlMatMul {
 public:
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;

  DnnlMatMul(dnnl::engine& engine, dt type, int64_t rows, int64_t n, int64_t k, const void* weights,
             const std::vector<float>* weight_scales)
      : engine_(engine), stream_(engine) {
    const dnnl::memory::desc src({rows, k}, type, tag::ab);
    const dnnl::memory::desc wei_any({k, n}, type, tag::any);
    const dnnl::memory::desc dst({rows, n}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (weight_scales != nullptr) attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei_any, dst), attr, engine);
    prim_ = dnnl::matmul(pd_);
    dnnl::memory user(dnnl::memory::desc({k, n}, type, tag::ba), engine, const_cast<void*>(weights));
    weights_ = dnnl::memory(pd_.weights_desc(), engine);
    dnnl::reorder(user, weights_).execute(stream_, user, weights_);
    stream_.wait();
    if (weight_scales != nullptr) scales_ = *weight_scales;
  }

  void Run(void* x, float* out, float x_scale) {
    dnnl::memory src(pd_.src_desc(), engine_, x);
    dnnl::memory dst(pd_.dst_desc(), engine_, out);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst}};
    std::vector<float> scales;
    if (!scales_.empty()) {
      scales.resize(scales_.size());
      for (size_t i = 0; i < scales.size(); ++i) scales[i] = scales_[i] * x_scale;
      args[DNNL_ARG_ATTR_OUTPUT_SCALES] = dnnl::memory({{static_cast<int64_t>(scales.size())}, dt::f32, tag::a},
                                                       engine_, scales.data());
    }
    prim_.execute(stream_, args);
    stream_.wait();
  }

 private:
  dnnl::engine& engine_;
  dnnl::stream stream_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  dnnl::memory weights_;
  std::vector<float> scales_;
};
#endif

// The columns of the speed table, in order; a column is absent where its code is not here.
std::vector<std::string> Columns() {
  std::vector<std::string> columns = {"kvtier f16", "kvtier bf16", "kvtier bf16x2", "kvtier bf16 best",
                                      "kvtier q8_0"};
#if defined(KVTIER_BENCH_OPENBLAS)
  columns.push_back("openblas sgemm");
#endif
#if defined(KVTIER_BENCH_DNNL)
  for (const char* c : {"onednn f32", "onednn bf16", "onednn s8"}) columns.push_back(c);
#endif
  return columns;
}

struct ShapeResult {
  std::vector<double> gflops;  // by Columns(); 0: not run here
  bool onednn_dispatch = false;  // "kvtier bf16 best" ran through oneDNN
  double dispatch_error = -1;    // "kvtier bf16 best" against the exact BF16 kernel
  double bf16x2_error = -1, f16_as_bf16x2_error = -1, dnnl_bf16_error = -1, dnnl_s8_error = -1;
};

ShapeResult RunShape(const Shape& shape, int64_t rows, int threads, double seconds) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = shape.out, k = shape.in;
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(rows * k));
  for (float& v : w) v = 0.02f * normal(rng);
  for (float& v : x) v = normal(rng);
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(n) * static_cast<double>(k);
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads, ThreadPool::Options{.spin_us = 100, .pin_workers = true});
  std::vector<uint8_t> scratch;
  std::vector<float> out(static_cast<size_t>(rows * n));
  auto time_matmul = [&](const CpuMatrix& m) {
    return flops / BestSeconds([&] { MatMul(m, x.data(), nullptr, rows, out.data(), pool.get(), &scratch); }, seconds) /
           1e9;
  };
  ShapeResult result;
  const Dot16Kernels* pairs = nullptr;
  for (const Dot16Kernels* set : SupportedDot16()) {
    if (!set->exact) pairs = set;
  }
  const CpuMatrix f16 = Matrix16(DType::kF16, w, n, k, &BestExactDot16());
  const CpuMatrix bf16 = Matrix16(DType::kBF16, w, n, k, &BestExactDot16());
  result.gflops.push_back(time_matmul(f16));
  const std::vector<float> f16_out = out;
  result.gflops.push_back(time_matmul(bf16));
  const std::vector<float> bf16_out = out;
  if (pairs != nullptr) {
    // The vdpbf16ps kernel alone, split over the pool as MatMul splits it.
    const CpuMatrix pairs_matrix = Matrix16(DType::kBF16, w, n, k, pairs);
    const uint16_t* pw = reinterpret_cast<const uint16_t*>(pairs_matrix.packed.data());
    auto kernel_only = [&] {
      const int64_t tiles = (n + 15) / 16;
      auto part = [&](int64_t t0, int64_t t1) {
        pairs->bf16(pw, k, t0 * 16, std::min(n, t1 * 16), x.data(), rows, nullptr, out.data(), n);
      };
      if (pool != nullptr) {
        pool->ParallelFor(tiles, part);
      } else {
        part(0, tiles);
      }
    };
    result.gflops.push_back(flops / BestSeconds(kernel_only, seconds) / 1e9);
    result.bf16x2_error = RelativeRms(out, bf16_out);
    result.gflops.push_back(time_matmul(pairs_matrix));
    result.onednn_dispatch = UsesOnednnBf16(pairs_matrix, rows);
    result.dispatch_error = RelativeRms(out, bf16_out);
    // F16 weights rounded to bf16 at load, against the F16 file's exact products.
    std::vector<float> from_f16(w.size());
    const uint16_t* h = reinterpret_cast<const uint16_t*>(f16.packed.data());
    for (size_t i = 0; i < w.size(); ++i) from_f16[i] = Fp16ToFloat(h[i]);
    MatMul(Matrix16(DType::kBF16, from_f16, n, k, pairs), x.data(), nullptr, rows, out.data(), pool.get(), &scratch);
    result.f16_as_bf16x2_error = RelativeRms(out, f16_out);
  } else {
    result.gflops.push_back(0);
    result.gflops.push_back(0);
  }
  {
    CpuMatrix q8;
    q8.dtype = DType::kQ8_0;
    q8.rows = n;
    q8.cols = k;
    q8.packed.resize(static_cast<size_t>(n) * DTypeBytes(DType::kQ8_0, k));
    for (int64_t r = 0; r < n; ++r) QuantizeQ8_0(w.data() + r * k, k, q8.packed.data() + r * q8.RowBytes());
    result.gflops.push_back(time_matmul(q8));
  }
  // The libraries on the values of the BF16 file, widened, so that errors compare alike.
  std::vector<float> wf(w.size());
  const uint16_t* b = reinterpret_cast<const uint16_t*>(bf16.packed.data());
  for (size_t i = 0; i < w.size(); ++i) wf[i] = Bf16ToFloat(b[i]);
#if defined(KVTIER_BENCH_OPENBLAS)
  openblas_set_num_threads(threads);
  result.gflops.push_back(flops / BestSeconds([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(n),
                static_cast<int>(k), 1.0f, x.data(), static_cast<int>(k), wf.data(), static_cast<int>(k), 0.0f,
                out.data(), static_cast<int>(n));
  }, seconds) / 1e9);
#endif
#if defined(KVTIER_BENCH_DNNL)
  omp_set_num_threads(threads);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  using dt = dnnl::memory::data_type;
  {
    DnnlMatMul mm(engine, dt::f32, rows, n, k, wf.data(), nullptr);
    result.gflops.push_back(flops / BestSeconds([&] { mm.Run(x.data(), out.data(), 1.0f); }, seconds) / 1e9);
  }
  {
    DnnlMatMul mm(engine, dt::bf16, rows, n, k, bf16.packed.data(), nullptr);
    std::vector<uint16_t> xb(x.size());
    result.gflops.push_back(flops / BestSeconds([&] {
      for (size_t i = 0; i < x.size(); ++i) xb[i] = FloatToBf16(x[i]);
      mm.Run(xb.data(), out.data(), 1.0f);
    }, seconds) / 1e9);
    result.dnnl_bf16_error = RelativeRms(out, bf16_out);
  }
  {
    std::vector<int8_t> wq(w.size());
    std::vector<float> row_scales(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(wf[r * k + c]));
      row_scales[r] = amax > 0 ? amax / 127 : 1;
      for (int64_t c = 0; c < k; ++c) wq[r * k + c] = static_cast<int8_t>(std::lrint(wf[r * k + c] / row_scales[r]));
    }
    DnnlMatMul mm(engine, dt::s8, rows, n, k, wq.data(), &row_scales);
    std::vector<int8_t> xq(x.size());
    float x_scale = 1;
    result.gflops.push_back(flops / BestSeconds([&] {
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      x_scale = amax > 0 ? amax / 127 : 1;
      const float inv = 1 / x_scale;
      for (size_t i = 0; i < x.size(); ++i) xq[i] = static_cast<int8_t>(std::lrint(x[i] * inv));
      mm.Run(xq.data(), out.data(), x_scale);
    }, seconds) / 1e9);
    result.dnnl_s8_error = RelativeRms(out, bf16_out);
  }
#endif
  return result;
}

std::string Cell(double v) {
  if (v <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string Error(double v) {
  if (v < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

int Main(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rows") {
      args.rows = std::atoll(value.c_str());
    } else if (flag == "--threads") {
      args.threads.clear();
      for (const std::string& t : Split(value)) args.threads.push_back(std::atoi(t.c_str()));
    } else if (flag == "--models") {
      args.models = Split(value);
    } else if (flag == "--seconds") {
      args.seconds = std::atof(value.c_str());
    } else {
      std::fprintf(stderr, "usage: kvtier_cpu_gemm_bench [--rows N] [--threads 1,2] [--models demo,1b] [--seconds S]\n");
      return 2;
    }
  }
  std::printf("GFLOP/s, %lld activation rows, best of rounds; 16-bit sets: best %.*s, exact %.*s\n\n",
              static_cast<long long>(args.rows), static_cast<int>(BestDot16().isa.size()), BestDot16().isa.data(),
              static_cast<int>(BestExactDot16().isa.size()), BestExactDot16().isa.data());
  const std::vector<std::string> columns = Columns();
  std::string header = "| model | shape (out x in) | threads |", rule = "|---|---|---|";
  for (const std::string& c : columns) {
    header += " " + c + " |";
    rule += "---|";
  }
  std::printf("%s\n%s\n", header.c_str(), rule.c_str());
  std::vector<std::string> errors;
  for (const Shape& shape : kShapes) {
    if (std::find(args.models.begin(), args.models.end(), shape.model) == args.models.end()) continue;
    for (int threads : args.threads) {
      const ShapeResult r = RunShape(shape, args.rows, threads, args.seconds);
      std::string line = std::string("| ") + shape.model + " | " + shape.name + " | " + std::to_string(threads) + " |";
      for (size_t c = 0; c < r.gflops.size(); ++c) {
        line += " " + Cell(r.gflops[c]) + (columns[c] == "kvtier bf16 best" && r.onednn_dispatch ? " onednn" : "") + " |";
      }
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      if (threads == args.threads.front()) {
        errors.push_back(std::string("| ") + shape.model + " | " + shape.name + " | " + Error(r.bf16x2_error) +
                         " | " + Error(r.dispatch_error) + " | " + Error(r.f16_as_bf16x2_error) + " | " + Error(r.dnnl_bf16_error) + " | " +
                         Error(r.dnnl_s8_error) + " |");
      }
    }
  }
  std::printf("\nrms(error) / rms(exact products): bf16x2 and the libraries against the exact BF16 kernel; "
              "f16 as bf16x2 (F16 weights rounded to bf16 at load) against the exact F16 kernel\n\n");
  std::printf("| model | shape | kvtier bf16x2 | kvtier bf16 best | f16 as bf16x2 | onednn bf16 | onednn s8 |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const std::string& e : errors) std::printf("%s\n", e.c_str());
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
