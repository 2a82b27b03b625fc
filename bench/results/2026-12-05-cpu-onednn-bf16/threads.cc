// threads: one 8192 x 2048 BF16 product at 512 rows through MatMul (oneDNN, onednn_bf16.h) and through
// the vdpbf16ps kernel alone, on one thread and on a pool of two; wall and process CPU seconds,
// best of four, three repetitions. Build as layout.cc (its header), without -fopenmp.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "backend/cpu/cpu_matrix.h"
#include "backend/cpu/dot16.h"
#include "common/thread_pool.h"
#include "model/tensor.h"
using namespace kvtier;
double Cpu() { timespec ts; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
double Wall() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main() {
  const int64_t n = 8192, k = 2048, rows = 512;
  std::mt19937 rng(1); std::normal_distribution<float> nd;
  CpuMatrix m; m.dtype = DType::kBF16; m.rows = n; m.cols = k; m.dot16 = &BestDot16();
  m.packed.resize(n * k * 2); uint16_t* w = reinterpret_cast<uint16_t*>(m.packed.data());
  for (int64_t i = 0; i < n * k; ++i) w[i] = FloatToBf16(0.02f * nd(rng));
  std::vector<float> x(rows * k), out(rows * n); for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> scratch;
  ThreadPool pool(2, ThreadPool::Options{.spin_us = 100, .pin_workers = true});
  for (int rep = 0; rep < 3; ++rep) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool two = variant & 1; const bool kernel = variant >= 2;
      double best_wall = 1e9, cpu_at_best = 0;
      for (int r = 0; r < 4; ++r) {
        double w0 = Wall(), c0 = Cpu();
        if (kernel) {
          const uint16_t* pw = w;
          auto part = [&](int64_t t0, int64_t t1) { BestDot16().bf16(pw, k, t0 * 16, std::min(n, t1 * 16), x.data(), rows, nullptr, out.data(), n); };
          if (two) pool.ParallelFor(n / 16, part); else part(0, n / 16);
        } else {
          MatMul(m, x.data(), nullptr, rows, out.data(), two ? &pool : nullptr, &scratch);
        }
        double dw = Wall() - w0, dc = Cpu() - c0;
        if (dw < best_wall) { best_wall = dw; cpu_at_best = dc; }
      }
      std::printf("%s %s: wall %.3f s cpu %.3f s -> %.0f GFLOP/s\n", kernel ? "kernel" : "onednn", two ? "2 threads" : "1 thread ", best_wall, cpu_at_best, 2.0 * rows * n * k / best_wall / 1e9);
    }
  }
}
