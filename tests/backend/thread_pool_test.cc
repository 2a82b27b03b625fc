// Tests of ThreadPool: coverage of [0, n), inline nesting, and concurrent callers.
#include "common/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnceInContiguousRanges) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 5, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
        EXPECT_LT(begin, end);
        ++calls;
        for (int64_t i = begin; i < end; ++i) ++hits[i];
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
      EXPECT_LE(calls, threads);
      if (n > 0) {
        EXPECT_EQ(calls, std::min<int64_t>(n, threads));
      }
    }
  }
}

TEST(ThreadPoolTest, NestedParallelForRunsInline) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.ParallelFor(10, [&](int64_t b, int64_t e) { total += e - b; });
    }
  });
  EXPECT_EQ(total, 80);
}

TEST(ThreadPoolTest, ConcurrentCallersTakeTurns) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        pool.ParallelFor(30, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total, 4 * 50 * 30);
}

TEST(ThreadPoolTest, SpinningPinnedPoolRunsEveryJobAfterIdleSpells) {
  // Jobs back to back (the workers still spinning) and after pauses longer than the spin
  // (the workers blocked): every range runs once either way.
  ThreadPool pool(3, ThreadPool::Options{.spin_us = 50, .pin_workers = true});
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> hits(17);
    pool.ParallelFor(17, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    });
    for (int i = 0; i < 17; ++i) ASSERT_EQ(hits[i], 1) << rep << " " << i;
    if (rep % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace
}  // namespace kvtier
