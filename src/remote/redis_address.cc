// Parsing of remote_kv_url (redis_address.h). Stateless; thread-safe.
#include "remote/redis_address.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvtier {

std::string RedisAddress::ToString() const { return absl::StrCat(host, ":", port); }

absl::StatusOr<std::vector<RedisAddress>> ParseRemoteKvUrl(std::string_view url_in) {
  const absl::string_view url(url_in.data(), url_in.size());
  constexpr absl::string_view kScheme = "redis://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote_kv_url '", url, "' must start with redis:// (redis://host:port[,host:port...])"));
  }
  std::vector<RedisAddress> nodes;
  for (absl::string_view node : absl::StrSplit(url.substr(kScheme.size()), ',')) {
    if (!node.empty() && node.back() == '/') node.remove_suffix(1);
    if (node.empty()) return absl::InvalidArgumentError(absl::StrCat("remote_kv_url '", url, "' has an empty node"));
    if (node.find('@') != absl::string_view::npos || node.find('/') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("remote_kv_url node '", node, "': only host:port is supported (no user, password or database)"));
    }
    RedisAddress address;
    const size_t colon = node.rfind(':');
    address.host = std::string(node.substr(0, colon));
    if (colon != absl::string_view::npos) {
      int port = 0;
      if (!absl::SimpleAtoi(node.substr(colon + 1), &port) || port < 1 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat("remote_kv_url node '", node, "': bad port"));
      }
      address.port = port;
    }
    if (address.host.empty()) return absl::InvalidArgumentError(absl::StrCat("remote_kv_url node '", node, "': no host"));
    nodes.push_back(std::move(address));
  }
  return nodes;
}

}  // namespace kvtier
