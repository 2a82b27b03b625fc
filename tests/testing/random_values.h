// Random test inputs shared by the CPU operator tests. Test-only; thread-compatible.
#ifndef KVTIER_TESTS_TESTING_RANDOM_VALUES_H_
#define KVTIER_TESTS_TESTING_RANDOM_VALUES_H_

#include <random>
#include <vector>

namespace kvtier::testing {

// n values drawn from N(0, scale^2).
inline std::vector<float> RandomNormal(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_RANDOM_VALUES_H_
