// GpuMemorySampler: reads GPU memory from OUTSIDE the process (nvidia-smi in a background
// thread, every ~100 ms) so `kvtier bench` can prove a memory cap holds by a measurement
// the engine does not control. Thread-safe: Start/Stop from one thread, readers any time.
//
// A reading belongs to the window (ResetPeaks to ResetPeaks) it started in: an nvidia-smi
// call takes tens of milliseconds, and one started while the previous workload's context
// still existed must not land in the next workload's peak (it once put the uncapped W3 run's
// 25,156 MiB into W4's capped row).
#ifndef KVTIER_TOOLS_KVTIER_BENCH_GPU_SAMPLER_H_
#define KVTIER_TOOLS_KVTIER_BENCH_GPU_SAMPLER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

namespace kvtier::cli {

// Runs a shell command and returns its stdout ("" on failure).
inline std::string RunCommandOutput(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}

class GpuMemorySampler {
 public:
  // run_command: what runs nvidia-smi (tests give a fake).
  explicit GpuMemorySampler(std::function<std::string(const std::string&)> run_command = RunCommandOutput,
                            std::chrono::milliseconds interval = std::chrono::milliseconds(100))
      : run_command_(std::move(run_command)), interval_(interval) {}
  ~GpuMemorySampler() { Stop(); }

  // False when nvidia-smi is not usable (no sampling then).
  bool Start() {
    if (run_command_("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null").empty()) {
      return false;
    }
    running_ = true;
    thread_ = std::thread([this] { Loop(); });
    return true;
  }
  void Stop() {
    if (!running_.exchange(false)) return;
    if (thread_.joinable()) thread_.join();
  }
  // Peaks since the last ResetPeaks, MiB: this process's compute-app entry (or, when the
  // process id is not visible in this namespace, the sum of all compute apps), and the
  // whole device's memory.used.
  void ResetPeaks() {
    std::lock_guard<std::mutex> lock(mu_);
    ++window_;
    peak_process_mib_ = 0;
    peak_device_mib_ = 0;
    samples_ = 0;
  }
  int64_t peak_process_mib() const { std::lock_guard<std::mutex> lock(mu_); return peak_process_mib_; }
  int64_t peak_device_mib() const { std::lock_guard<std::mutex> lock(mu_); return peak_device_mib_; }
  int64_t samples() const { std::lock_guard<std::mutex> lock(mu_); return samples_; }

 private:
  void Loop() {
    const long self = static_cast<long>(getpid());
    while (running_) {
      int64_t window = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        window = window_;
      }
      const std::string apps =
          run_command_("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null");
      int64_t mine = -1, all = 0;
      size_t start = 0;
      while (start < apps.size()) {
        size_t end = apps.find('\n', start);
        if (end == std::string::npos) end = apps.size();
        long pid = 0;
        long long mib = 0;
        if (std::sscanf(apps.substr(start, end - start).c_str(), "%ld, %lld", &pid, &mib) == 2) {
          all += mib;
          if (pid == self) mine = mib;
        }
        start = end + 1;
      }
      const std::string used = run_command_("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null");
      const int64_t device = used.empty() ? 0 : std::atoll(used.c_str());
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (window != window_) continue;  // started before ResetPeaks: the previous window's
        const int64_t process = mine >= 0 ? mine : all;
        if (process > peak_process_mib_) peak_process_mib_ = process;
        if (device > peak_device_mib_) peak_device_mib_ = device;
        ++samples_;
      }
      std::this_thread::sleep_for(interval_);
    }
  }

  const std::function<std::string(const std::string&)> run_command_;
  const std::chrono::milliseconds interval_;
  int64_t window_ = 0;  // guarded by mu_
  std::atomic<bool> running_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  int64_t peak_process_mib_ = 0;
  int64_t peak_device_mib_ = 0;
  int64_t samples_ = 0;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_BENCH_GPU_SAMPLER_H_
