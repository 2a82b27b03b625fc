// disk_read_order: what a file's layout costs the disk tier's reads on this machine. Reads
// SLOTS slots of a disk-tier-sized file (2 MiB blocks + a 4 KiB header) the way a prefix
// match does — whole slots, O_DIRECT, THREADS reads in flight (Transfers::kReaderThreads) —
// once in file order and once in a shuffled order, alternating, ROUNDS times, the page cache
// dropped before each pass. A W6c "load only" phase reads its prefix in file order only when
// the prefix was persisted in prompt order (disk_reads.in_file_order in its stats).
// Writes FILE (SLOTS slots of random bytes) when it is missing or shorter.
//
// Build: g++ -O2 -std=c++20 -pthread bench/micro/disk_read_order.cc -o disk_read_order
// Run:   ./disk_read_order FILE [SLOTS=330] [THREADS=8] [ROUNDS=3]
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBlockBytes = size_t{2} << 20;
constexpr size_t kSlotBytes = kBlockBytes + 4096;  // a slot: its header page, then the block
constexpr size_t kAlignment = 4096;

bool WriteSlots(const char* path, int slots) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  std::vector<unsigned char> slot(kSlotBytes);
  std::mt19937_64 rng(1);
  for (int s = 0; s < slots; ++s) {
    for (size_t i = 0; i < slot.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(slot.data() + i, &v, 8);
    }
    if (write(fd, slot.data(), slot.size()) != static_cast<ssize_t>(slot.size())) return false;
  }
  const bool synced = fdatasync(fd) == 0;
  close(fd);
  return synced;
}

void DropPageCache(const char* path) {
  const int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

// Seconds to read `order`'s slots with `threads` readers taking the next slot in turn.
double ReadPass(const char* path, const std::vector<int>& order, int threads) {
  DropPageCache(path);
  const int fd = open(path, O_RDONLY | O_DIRECT);
  if (fd < 0) {
    std::perror("open O_DIRECT");
    std::exit(1);
  }
  std::atomic<size_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> readers;
  for (int t = 0; t < threads; ++t) {
    readers.emplace_back([&] {
      void* buffer = std::aligned_alloc(kAlignment, kSlotBytes);
      std::memset(buffer, 0, kSlotBytes);  // paged in before the clock matters
      for (size_t i; (i = next.fetch_add(1)) < order.size();) {
        const off_t offset = static_cast<off_t>(order[i]) * static_cast<off_t>(kSlotBytes);
        if (pread(fd, buffer, kSlotBytes, offset) != static_cast<ssize_t>(kSlotBytes)) {
          std::perror("pread");
          std::exit(1);
        }
      }
      std::free(buffer);
    });
  }
  for (std::thread& r : readers) r.join();
  close(fd);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [SLOTS=330] [THREADS=8] [ROUNDS=3]\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  const int slots = argc > 2 ? std::atoi(argv[2]) : 330;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 8;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  struct stat st {};
  if (stat(path, &st) != 0 || st.st_size < static_cast<off_t>(slots * kSlotBytes)) {
    if (!WriteSlots(path, slots)) {
      std::perror("writing the file");
      return 1;
    }
  }
  std::vector<int> in_order(static_cast<size_t>(slots));
  std::iota(in_order.begin(), in_order.end(), 0);
  std::vector<int> shuffled = in_order;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(4096));
  for (int round = 1; round <= rounds; ++round) {
    for (const bool file_order : {true, false}) {
      const double s = ReadPass(path, file_order ? in_order : shuffled, threads);
      std::printf("round %d %-10s %d slots, %d threads: %.3f s, %.2f GB/s\n", round,
                  file_order ? "file order" : "shuffled", slots, threads, s,
                  static_cast<double>(slots) * static_cast<double>(kBlockBytes) / s / 1e9);
    }
  }
  return 0;
}
