// ||got - want|| / ||want|| of two float vectors: the error measure of the backend and kernel
// tests; infinity when got has a non-finite value or the sizes differ.
#ifndef KVTIER_TESTS_TESTING_RELATIVE_ERROR_H_
#define KVTIER_TESTS_TESTING_RELATIVE_ERROR_H_

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvtier::testing {

inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_RELATIVE_ERROR_H_
