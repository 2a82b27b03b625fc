// Lists of integers given to the CUDA benchmarks as comma-separated text ("16,32,64"), from an
// argument or an environment variable.
#ifndef KVTIER_TESTS_BACKEND_CUDA_BENCH_ENV_H_
#define KVTIER_TESTS_BACKEND_CUDA_BENCH_ENV_H_

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace kvtier {

inline std::vector<int> IntList(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

// The list in environment variable `name`, or `fallback` where it is not set.
inline std::vector<int> EnvIntList(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return IntList(value != nullptr ? value : fallback);
}

}  // namespace kvtier

#endif  // KVTIER_TESTS_BACKEND_CUDA_BENCH_ENV_H_
