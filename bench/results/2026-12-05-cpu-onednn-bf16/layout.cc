// layout: oneDNN bf16 matmul (Debian libdnnl2 2.6.3) on the CPU backend's row-major bf16 weights
// ("plain": a (k x n) matrix in column order, no copy) and on oneDNN's blocked layout ("packed":
// tag::any, reordered once), the row count fixed or a run-time dimension (DNNL_RUNTIME_DIM_VAL),
// against kvtier's vdpbf16ps kernel (BestDot16().bf16, one call); GFLOP/s, 1 thread (a std::thread with
// omp_set_num_threads(1)), best of rounds; and the process's thread count before and after.
// build (from the worktree root, after ninja -C build kvtier_cpu_gemm_bench): g++ -O2 -std=c++20
// -fopenmp -Isrc -Ibuild/src -Ibuild -o /tmp/layout layout.cc <the LINK_LIBRARIES of
// kvtier_cpu_gemm_bench in build/build.ninja>; run: /tmp/layout 0.2
#include <dirent.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>
#include "oneapi/dnnl/dnnl.hpp"
#include "backend/cpu/dot16.h"
#include "model/tensor.h"
using namespace kvtier;
using dt = dnnl::memory::data_type; using tag = dnnl::memory::format_tag;
int Tasks() { int n = 0; DIR* d = opendir("/proc/self/task"); while (readdir(d)) ++n; closedir(d); return n - 2; }
double Best(const std::function<void()>& fn, double s) { fn(); double best = 1e30, tot = 0;
  for (int r = 0; r < 3 || tot < s; ++r) { auto a = std::chrono::steady_clock::now(); fn();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count(); best = std::min(best, t); tot += t; }
  return best; }
int main(int argc, char** argv) {
  double secs = argc > 1 ? atof(argv[1]) : 0.3;
  std::thread th([&] {
  omp_set_num_threads(1);
  std::printf("tasks before dnnl: %d\n", Tasks());
  dnnl::engine eng(dnnl::engine::kind::cpu, 0); dnnl::stream st(eng);
  struct S { int64_t n, k; } shapes[] = {{256,256},{768,256},{256,768},{2048,2048},{512,2048},{8192,2048},{2048,8192}};
  std::mt19937 rng(7); std::normal_distribution<float> nd;
  std::printf("| n x k | M | kvtier bf16x2 | plain fixedM | plain rtM | packed fixedM | packed rtM |\n");
  for (auto s : shapes) for (int64_t M : {512, 128, 32, 8}) {
    std::vector<uint16_t> w(s.n * s.k); for (auto& v : w) v = FloatToBf16(0.02f * nd(rng));
    std::vector<float> x(M * s.k); for (auto& v : x) v = nd(rng);
    std::vector<uint16_t> xb(x.size()); std::vector<float> out(M * s.n);
    double flops = 2.0 * M * s.n * s.k;
    double g0 = flops / Best([&] { BestDot16().bf16(w.data(), s.k, 0, s.n, x.data(), M, nullptr, out.data(), s.n); }, secs) / 1e9;
    double g[4];
    for (int v = 0; v < 4; ++v) {
      bool packed = v >= 2, rt = v & 1;
      int64_t Md = rt ? DNNL_RUNTIME_DIM_VAL : M;
      dnnl::memory::desc src({Md, s.k}, dt::bf16, tag::ab), dst({Md, s.n}, dt::f32, tag::ab);
      dnnl::memory::desc wd({s.k, s.n}, dt::bf16, packed ? tag::any : tag::ba);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wd, dst), eng);
      dnnl::matmul prim(pd);
      dnnl::memory user({{s.k, s.n}, dt::bf16, tag::ba}, eng, w.data());
      dnnl::memory wm = user;
      if (packed) { wm = dnnl::memory(pd.weights_desc(), eng); dnnl::reorder(user, wm).execute(st, user, wm); st.wait(); }
      dnnl::memory sm({{M, s.k}, dt::bf16, tag::ab}, eng, xb.data()), dm({{M, s.n}, dt::f32, tag::ab}, eng, out.data());
      g[v] = flops / Best([&] { for (size_t i = 0; i < x.size(); ++i) xb[i] = FloatToBf16(x[i]);
        prim.execute(st, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dm}}); st.wait(); }, secs) / 1e9;
      if (v == 0 && M == 512 && s.n == 256 && s.k == 256) std::printf("impl plain: %s\n", pd.impl_info_str());
      if (v == 2 && M == 512 && s.n == 256 && s.k == 256) std::printf("impl packed: %s\n", pd.impl_info_str());
    }
    std::printf("| %lldx%lld | %lld | %.1f | %.1f | %.1f | %.1f | %.1f |\n", (long long)s.n, (long long)s.k, (long long)M, g0, g[0], g[1], g[2], g[3]);
    std::fflush(stdout);
  }
  std::printf("tasks after dnnl: %d\n", Tasks());
  });
  th.join();
}
