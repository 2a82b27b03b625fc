// The host's share of loading an fp8 checkpoint with weight_dtype fp8 (cuda/weight_loaders.cc):
// one Mixtral-expert-sized matrix (14336 x 4096 E4M3 codes) with per-channel and with 128 x 128
// block scales, brought to kvtier's per-channel format three ways: the whole matrix dequantized
// to a fresh vector of floats element by element (each code decoded, each scale looked up with
// two divisions: the loader's former dequantization) then quantized; the same with
// DequantizeFp8Rows; and a row at a time (RequantizeFp8Rows), on one thread and on a pool of
// every core. Checks that all give the same bytes; prints milliseconds and millions of elements
// per second.
// Built on request: `ninja -C build kvtier_fp8_requantize_bench`. Not a test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "common/fp8_e4m3.h"
#include "common/thread_pool.h"
#include "model/fp8_weights.h"

namespace kvtier {
namespace {

constexpr int64_t kRows = 14336, kCols = 4096;

template <typename F>
double Ms(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void Run(const char* layout, int64_t block_rows, int64_t block_cols, ThreadPool& pool) {
  std::mt19937 rng(7);
  std::vector<uint8_t> codes(static_cast<size_t>(kRows * kCols));
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() % 0x7e) | static_cast<uint8_t>(rng() & 0x80);
  TensorView weight{"w", DType::kF8E4M3, {kRows, kCols}, codes.data()};
  Fp8Scales scales;
  scales.rows = kRows, scales.cols = kCols, scales.block_rows = block_rows, scales.block_cols = block_cols;
  scales.grid_rows = (kRows + block_rows - 1) / block_rows, scales.grid_cols = (kCols + block_cols - 1) / block_cols;
  std::uniform_real_distribution<float> scale(1e-4f, 1e-2f);
  for (int64_t i = 0; i < scales.grid_rows * scales.grid_cols; ++i) scales.values.push_back(scale(rng));
  for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
    auto rows = [&](auto&& f) {
      if (threads == nullptr) return f(int64_t{0}, kRows);
      threads->ParallelFor(kRows, f);
    };
    std::vector<uint8_t> two_pass_codes;
    std::vector<float> two_pass_scales;
    auto two_pass_run = [&](bool per_element) {
      return Ms([&] {
        std::vector<float> values(static_cast<size_t>(kRows * kCols));
        two_pass_codes.assign(values.size(), 0);
        two_pass_scales.assign(static_cast<size_t>(kRows), 0.0f);
        rows([&](int64_t b, int64_t e) {
          if (!per_element) return DequantizeFp8Rows(weight, scales, b, e, values.data());
          for (int64_t r = b; r < e; ++r) {
            for (int64_t c = 0; c < kCols; ++c) {
              values[r * kCols + c] = Fp8E4M3ToFloat(codes[r * kCols + c]) * scales.At(r, c);
            }
          }
        });
        rows([&](int64_t b, int64_t e) {
          QuantizeRowsFp8(values.data() + b * kCols, e - b, kCols, two_pass_codes.data() + b * kCols,
                          two_pass_scales.data() + b);
        });
      });
    };
    const double former = two_pass_run(true);
    const std::vector<uint8_t> former_codes = two_pass_codes;
    const double two_pass = two_pass_run(false);
    std::unique_ptr<uint8_t[]> one_pass_codes(new uint8_t[static_cast<size_t>(kRows * kCols)]);
    std::vector<float> one_pass_scales(static_cast<size_t>(kRows));
    const double one_pass = Ms([&] {
      rows([&](int64_t b, int64_t e) {
        RequantizeFp8Rows(weight, scales, b, e, one_pass_codes.get(), one_pass_scales.data());
      });
    });
    const bool same = std::equal(two_pass_codes.begin(), two_pass_codes.end(), one_pass_codes.get()) &&
                      two_pass_scales == one_pass_scales && former_codes == two_pass_codes;
    const double m = static_cast<double>(kRows * kCols) / 1e6;
    std::printf("%-12s %-8s per element %7.1f ms (%5.0f M/s)  two-pass %7.1f ms (%5.0f M/s)  row at a time %7.1f ms"
                " (%5.0f M/s)  %s\n",
                layout, threads == nullptr ? "1 thread" : "pool", former, m / former * 1e3, two_pass,
                m / two_pass * 1e3, one_pass, m / one_pass * 1e3, same ? "same bytes" : "BYTES DIFFER");
  }
}

}  // namespace
}  // namespace kvtier

int main() {
  kvtier::ThreadPool pool(0);
  std::printf("%lld x %lld E4M3, %d pool threads\n", static_cast<long long>(kvtier::kRows),
              static_cast<long long>(kvtier::kCols), pool.num_threads());
  kvtier::Run("per-channel", 1, kvtier::kCols, pool);
  kvtier::Run("block 128", 128, 128, pool);
  return 0;
}
