// GrammarMasks (grammar_masks.h).
#include "engine/grammar_masks.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace kvtier {
GrammarMasks::GrammarMasks(Backend* backend, int32_t vocab_size, int num_threads)
    : backend_(backend), words_per_row_((vocab_size + 31) / 32), num_threads_(num_threads) {
  view_.words_per_row = words_per_row_;
  view_.wait = [this] { WaitForMasks(); };
}

GrammarMasks::~GrammarMasks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (storage_ != nullptr) backend_->FreeHostMemory(storage_);
}

void GrammarMasks::BeginStep(size_t num_logit_rows) {
  view_.slot_of_row.assign(num_logit_rows, TokenMasks::kNoMask);
  view_.num_slots = 0;
  matchers_.clear();
}

absl::Status GrammarMasks::AddRow(size_t row, grammar::Matcher* matcher) {
  const size_t slot = matchers_.size();
  if (slot + 1 > capacity_) {
    // Grows rarely: to the most rows seen at once, doubled.
    const size_t rows = std::max<size_t>(2 * capacity_, std::max<size_t>(slot + 1, 8));
    absl::StatusOr<void*> memory = backend_->AllocateHostMemory(rows * static_cast<size_t>(words_per_row_) * 4);
    if (!memory.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("grammar masks: ", memory.status().message()));
    }
    if (storage_ != nullptr) backend_->FreeHostMemory(storage_);
    storage_ = static_cast<uint32_t*>(*memory);
    capacity_ = rows;
  }
  view_.slot_of_row[row] = static_cast<int32_t>(slot);
  matchers_.push_back(matcher);
  view_.num_slots = static_cast<int32_t>(matchers_.size());
  return absl::OkStatus();
}

const TokenMasks* GrammarMasks::Start() {
  if (matchers_.empty()) return nullptr;
  view_.words = storage_;
  empty_.assign(matchers_.size(), 0);
  if (!worker_.joinable()) {
    pool_ = std::make_unique<ThreadPool>(num_threads_);
    worker_ = std::thread([this] { WorkerLoop(); });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = true;
    done_ = false;
  }
  cv_.notify_all();
  return &view_;
}

void GrammarMasks::WorkerLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || job_; });
      if (stop_) return;
      job_ = false;
    }
    const auto start = std::chrono::steady_clock::now();
    pool_->ParallelFor(static_cast<int64_t>(matchers_.size()), [&](int64_t begin, int64_t end) {
      for (int64_t slot = begin; slot < end; ++slot) {
        std::span<uint32_t> words(storage_ + static_cast<size_t>(slot) * static_cast<size_t>(words_per_row_),
                                  static_cast<size_t>(words_per_row_));
        matchers_[static_cast<size_t>(slot)]->FillMask(words);
        empty_[static_cast<size_t>(slot)] =
            std::all_of(words.begin(), words.end(), [](uint32_t w) { return w == 0; }) ? 1 : 0;
      }
    });
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_seconds_ = SecondsSince(start);
      done_ = true;
    }
    cv_.notify_all();
  }
}

void GrammarMasks::WaitForMasks() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (done_) return;
  cv_.wait(lock, [&] { return done_; });
  counters_.wait_seconds += SecondsSince(start);
}

void GrammarMasks::Finish() {
  if (matchers_.empty()) return;
  WaitForMasks();
  std::lock_guard<std::mutex> lock(mu_);
  counters_.rows += static_cast<int64_t>(matchers_.size());
  counters_.compute_seconds += job_seconds_;
}

bool GrammarMasks::AllowsNothing(size_t row) const {
  if (row >= view_.slot_of_row.size() || view_.slot_of_row[row] == TokenMasks::kNoMask) return false;
  return empty_[static_cast<size_t>(view_.slot_of_row[row])] != 0;
}

}  // namespace kvtier
