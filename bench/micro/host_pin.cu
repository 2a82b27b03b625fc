// How fast a host tier can be pinned: an 8 GiB anonymous mapping (as
// Backend::ReserveHostMemory makes it) paged in and registered with cudaHostRegister in
// chunks, as HostTierMemory::PinChunk does, timing the paging-in and the registration apart:
// 4 KiB pages against transparent huge pages (MADV_HUGEPAGE), 32 MiB against 256 MiB chunks,
// paging-in on 4 threads ahead of the registration, and the same while another thread copies
// host -> device (the driver lock both take).
//
// Build: nvcc -O2 -std=c++17 -arch=sm_90 bench/micro/host_pin.cu -o host_pin
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr size_t kRegion = size_t{8} << 30;

void Populate(uint8_t* p, size_t n) {
  if (::madvise(p, n, MADV_POPULATE_WRITE) != 0) {
    for (size_t at = 0; at < n; at += 4096) static_cast<volatile uint8_t*>(p)[at] = 0;
  }
}

struct Variant {
  const char* name;
  size_t chunk;
  bool huge;
  int populate_threads;  // 0: populate each chunk right before its registration
  bool copy_beside;      // another thread copies host -> device meanwhile
};

void Run(const Variant& v) {
  void* m = ::mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) std::exit(2);
  auto* base = static_cast<uint8_t*>(m);
  if (v.huge) ::madvise(base, kRegion, MADV_HUGEPAGE);
  const size_t chunks = kRegion / v.chunk;
  std::vector<std::atomic<int>> populated(chunks);
  std::vector<std::thread> populators;
  std::atomic<size_t> next{0};
  for (int t = 0; t < v.populate_threads; ++t) {
    populators.emplace_back([&] {
      for (size_t c; (c = next.fetch_add(1)) < chunks;) {
        Populate(base + c * v.chunk, v.chunk);
        populated[c].store(1, std::memory_order_release);
      }
    });
  }
  std::atomic<bool> stop{false};
  std::atomic<long> copied{0};
  std::thread copier;
  void* dev = nullptr;
  void* src = nullptr;
  if (v.copy_beside) {
    CHECK(cudaMalloc(&dev, 64 << 20));
    CHECK(cudaMallocHost(&src, 64 << 20));
    copier = std::thread([&] {
      cudaStream_t s;
      CHECK(cudaStreamCreate(&s));
      while (!stop.load()) {
        CHECK(cudaMemcpyAsync(dev, src, 64 << 20, cudaMemcpyHostToDevice, s));
        CHECK(cudaStreamSynchronize(s));
        copied.fetch_add(64 << 20);
      }
      cudaStreamDestroy(s);
    });
  }
  double populate_s = 0, register_s = 0, worst_register_s = 0;
  const auto start = Clock::now();
  double first_gib_s = 0;
  for (size_t c = 0; c < chunks; ++c) {
    uint8_t* p = base + c * v.chunk;
    auto t = Clock::now();
    if (v.populate_threads == 0) {
      Populate(p, v.chunk);
    } else {
      while (!populated[c].load(std::memory_order_acquire)) std::this_thread::yield();
    }
    populate_s += Since(t);
    t = Clock::now();
    CHECK(cudaHostRegister(p, v.chunk, cudaHostRegisterMapped));
    const double r = Since(t);
    register_s += r;
    worst_register_s = std::max(worst_register_s, r);
    if ((c + 1) * v.chunk == (size_t{1} << 30)) first_gib_s = Since(start);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const double total = Since(start);
  stop = true;
  if (copier.joinable()) copier.join();
  for (std::thread& t : populators) t.join();
  std::printf("%-44s %6.2f GB/s  (1st GiB %.3f s; waiting for pages %.2f s, registering %.2f s, worst register %.1f ms)",
              v.name, kRegion / total / 1e9, first_gib_s, populate_s, register_s, worst_register_s * 1e3);
  if (v.copy_beside) std::printf("  copies beside %.1f GB/s", copied.load() / total / 1e9);
  std::printf("\n");
  const auto t = Clock::now();
  for (size_t c = 0; c < chunks; ++c) CHECK(cudaHostUnregister(base + c * v.chunk));
  ::munmap(base, kRegion);
  std::printf("%-44s unregister + unmap %.2f s\n", "", Since(t));
  if (dev) cudaFree(dev);
  if (src) cudaFreeHost(src);
}

}  // namespace

int main() {
  CHECK(cudaFree(nullptr));
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  std::printf("transparent_hugepage: %s\n", mode.c_str());
  const Variant variants[] = {
      {"4K pages, 32 MiB chunks (PinChunk today)", 32 << 20, false, 0, false},
      {"huge pages, 32 MiB chunks", 32 << 20, true, 0, false},
      {"huge pages, 256 MiB chunks", 256 << 20, true, 0, false},
      {"4K pages, 32 MiB, populate on 4 threads", 32 << 20, false, 4, false},
      {"huge pages, 32 MiB, populate on 4 threads", 32 << 20, true, 4, false},
      {"4K pages, 32 MiB, copies beside", 32 << 20, false, 0, true},
      {"huge pages, 32 MiB, 4 populate, copies beside", 32 << 20, true, 4, true},
  };
  for (const Variant& v : variants) Run(v);
  return 0;
}
