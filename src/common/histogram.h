// Histogram: counts of observations in fixed buckets, kept the way Prometheus exposes
// them (each bucket counts the observations <= its upper bound; the +Inf bucket is the
// total count). Fixed bounds make two snapshots comparable and the memory constant.
// Thread-compatible: the owner serialises Observe and the readers.
#ifndef KVTIER_COMMON_HISTOGRAM_H_
#define KVTIER_COMMON_HISTOGRAM_H_

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace kvtier {

class Histogram {
 public:
  // bounds: finite upper bounds, strictly ascending (the +Inf bucket is implicit).
  explicit Histogram(std::initializer_list<double> bounds) : bounds_(bounds), counts_(bounds_.size(), 0) {}

  void Observe(double value) {
    // The first bucket whose bound is >= value; past the last: only the +Inf bucket.
    const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
    if (it != bounds_.end()) ++counts_[static_cast<size_t>(it - bounds_.begin())];
    ++count_;
    sum_ += value;
  }

  const std::vector<double>& bounds() const { return bounds_; }
  // Per bound, the observations <= it (cumulative, as Prometheus' "le" buckets).
  std::vector<int64_t> CumulativeCounts() const {
    std::vector<int64_t> cumulative(counts_.size());
    int64_t running = 0;
    for (size_t i = 0; i < counts_.size(); ++i) cumulative[i] = running += counts_[i];
    return cumulative;
  }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_HISTOGRAM_H_
