// kvtier bench's outside GPU memory sampler (tools/kvtier/bench_gpu_sampler.h): a reading
// that was in flight when a workload's window began (ResetPeaks) belongs to the window before
// and never lands in the new one's peak — the race that once gave a capped workload the
// uncapped run's memory before it.
#include "bench_gpu_sampler.h"

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "gtest/gtest.h"

namespace kvtier::cli {
namespace {

TEST(GpuMemorySamplerTest, AReadingInFlightAcrossAResetStaysInTheWindowItStartedIn) {
  std::mutex mu;
  std::condition_variable cv;
  int app_queries = 0;
  bool reset_done = false;
  const std::string self = std::to_string(getpid());
  auto run = [&](const std::string& command) -> std::string {
    if (command.find("memory.used") != std::string::npos) return "1000";
    std::unique_lock<std::mutex> lock(mu);
    const int call = ++app_queries;
    cv.notify_all();
    if (call == 1) {
      // The previous workload's context is still there; the reading returns after the reset.
      cv.wait(lock, [&] { return reset_done; });
      return self + ", 25156";
    }
    return self + ", 24000";
  };
  GpuMemorySampler sampler(run, std::chrono::milliseconds(1));
  ASSERT_TRUE(sampler.Start());
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return app_queries >= 1; });
  }
  sampler.ResetPeaks();
  {
    std::lock_guard<std::mutex> lock(mu);
    reset_done = true;
  }
  cv.notify_all();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return app_queries >= 3; });  // a reading wholly inside the new window has been stored
  }
  sampler.Stop();
  EXPECT_EQ(sampler.peak_process_mib(), 24000);
  EXPECT_GE(sampler.samples(), 1);
}

}  // namespace
}  // namespace kvtier::cli
