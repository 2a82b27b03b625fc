// PrefillAttentionOf (bench_compute_path.h).
#include "bench_compute_path.h"

namespace kvtier::cli::bench {

std::string PrefillAttentionOf(std::string_view compute_path) {
  static constexpr std::string_view kMarker = "prefill attention ";
  const size_t at = compute_path.find(kMarker);
  if (at == std::string_view::npos) return "";
  const std::string_view rest = compute_path.substr(at + kMarker.size());
  return std::string(rest.substr(0, rest.find(" (")));
}

}  // namespace kvtier::cli::bench
