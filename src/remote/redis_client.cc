// RedisClient (redis_client.h): single node or cluster routing, pipelining per node,
// MOVED / ASK redirections.
#include "remote/redis_client.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvtier {
namespace {

// A redirection followed at most this many times per command (a slot in migration can
// redirect twice: MOVED to the new owner, then ASK back while it imports).
constexpr int kMaxRedirections = 5;

uint16_t Crc16(std::string_view data) {  // CRC16/XMODEM, as Redis Cluster hashes keys
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc ^= static_cast<uint16_t>(c) << 8;
    for (int i = 0; i < 8; ++i) crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : crc << 1;
  }
  return crc;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381": the target node.
std::optional<RedisAddress> RedirectTarget(const std::string& error, absl::string_view kind) {
  if (!absl::StartsWith(error, kind)) return std::nullopt;
  const std::vector<absl::string_view> parts = absl::StrSplit(error, ' ');
  if (parts.size() != 3) return std::nullopt;
  const size_t colon = parts[2].rfind(':');
  RedisAddress target;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(parts[2].substr(colon + 1), &target.port)) {
    return std::nullopt;
  }
  target.host = std::string(parts[2].substr(0, colon));
  return target;
}

}  // namespace

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key) % kRedisClusterSlots;
}

RedisClient::RedisClient(std::vector<RedisAddress> seeds, std::chrono::milliseconds timeout)
    : seeds_(std::move(seeds)), timeout_(timeout) {}

void RedisClient::Disconnect() {
  connections_.clear();
  connected_ = false;
}

absl::StatusOr<RedisConnection*> RedisClient::ConnectionTo(const RedisAddress& address) {
  const std::string name = address.ToString();
  auto it = connections_.find(name);
  if (it != connections_.end() && !it->second->broken()) return it->second.get();
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection = RedisConnection::Connect(address, timeout_);
  if (!connection.ok()) return connection.status();
  RedisConnection* raw = connection->get();
  connections_[name] = *std::move(connection);
  return raw;
}

absl::StatusOr<bool> RedisClient::LoadSlotMap(RedisConnection* connection) {
  const RedisCommand slots{{"CLUSTER", "SLOTS"}};
  const RedisCommand* command = &slots;
  std::vector<RedisReply> replies;
  if (absl::Status s = connection->Pipeline(std::span<const RedisCommand* const>(&command, 1), &replies); !s.ok()) {
    return s;
  }
  const RedisReply& reply = replies[0];
  if (reply.kind == RedisReply::Kind::kError) {
    if (absl::StrContains(reply.str, "cluster support disabled")) return false;
    return absl::UnavailableError(absl::StrCat("redis ", connection->address().ToString(), ": CLUSTER SLOTS: ", reply.str));
  }
  if (reply.kind != RedisReply::Kind::kArray) {
    return absl::UnavailableError(absl::StrCat("redis ", connection->address().ToString(), ": bad CLUSTER SLOTS reply"));
  }
  nodes_.clear();
  slot_owner_.fill(-1);
  for (const RedisReply& range : reply.elements) {
    if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) continue;
    const RedisReply& master = range.elements[2];
    RedisAddress node{master.elements[0].str, static_cast<int>(master.elements[1].integer)};
    if (node.host.empty()) node.host = connection->address().host;  // "" = the node asked
    int16_t index = -1;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i] == node) index = static_cast<int16_t>(i);
    }
    if (index < 0) {
      index = static_cast<int16_t>(nodes_.size());
      nodes_.push_back(node);
    }
    const int64_t begin = range.elements[0].integer, end = range.elements[1].integer;
    for (int64_t slot = std::max<int64_t>(begin, 0); slot <= end && slot < kRedisClusterSlots; ++slot) {
      slot_owner_[static_cast<size_t>(slot)] = index;
    }
  }
  if (nodes_.empty()) {
    return absl::UnavailableError(absl::StrCat("redis ", connection->address().ToString(), ": the cluster has no slots assigned"));
  }
  return true;
}

absl::Status RedisClient::Connect() {
  Disconnect();
  std::string failures;
  for (const RedisAddress& seed : seeds_) {
    absl::StatusOr<RedisConnection*> connection = ConnectionTo(seed);
    absl::StatusOr<bool> cluster = connection.ok() ? LoadSlotMap(*connection) : connection.status();
    if (!cluster.ok()) {
      absl::StrAppend(&failures, failures.empty() ? "" : "; ", cluster.status().message());
      connections_.erase(seed.ToString());
      continue;
    }
    cluster_ = *cluster;
    single_ = seed;
    connected_ = true;
    return absl::OkStatus();
  }
  return absl::UnavailableError(failures);
}

RedisAddress RedisClient::NodeFor(const RedisCommand& command) const {
  if (!cluster_ || command.args.size() < 2) return cluster_ && !nodes_.empty() ? nodes_[0] : single_;
  const int16_t owner = slot_owner_[static_cast<size_t>(KeySlot(command.args[1]))];
  return owner >= 0 ? nodes_[static_cast<size_t>(owner)] : nodes_[0];
}

absl::Status RedisClient::Execute(const std::vector<RedisCommand>& commands, std::vector<RedisReply>* replies,
                                  const BulkDestination& destination) {
  if (!connected_) return absl::UnavailableError("redis: not connected");
  replies->assign(commands.size(), RedisReply{});
  struct Pending {
    size_t index;
    std::optional<RedisAddress> ask;  // an ASK redirection: ASKING first, on that node
  };
  std::vector<Pending> pending;
  pending.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) pending.push_back({i, std::nullopt});
  const RedisCommand asking{{"ASKING"}};
  for (int round = 0; !pending.empty(); ++round) {
    // Commands grouped by the node they go to, in order (replies come back in order).
    std::map<std::string, std::pair<RedisAddress, std::vector<const Pending*>>> by_node;
    for (const Pending& p : pending) {
      const RedisAddress node = p.ask ? *p.ask : NodeFor(commands[p.index]);
      auto& group = by_node[node.ToString()];
      group.first = node;
      group.second.push_back(&p);
    }
    std::vector<Pending> again;
    for (auto& node_and_group : by_node) {
      auto& group = node_and_group.second;  // not a structured binding: a lambda captures it
      absl::StatusOr<RedisConnection*> connection = ConnectionTo(group.first);
      if (!connection.ok()) {
        Disconnect();
        return connection.status();
      }
      std::vector<const RedisCommand*> batch;
      std::vector<int> reply_of;  // batch position -> index into group.second (-1: ASKING)
      for (size_t g = 0; g < group.second.size(); ++g) {
        if (group.second[g]->ask) {
          batch.push_back(&asking);
          reply_of.push_back(-1);
        }
        batch.push_back(&commands[group.second[g]->index]);
        reply_of.push_back(static_cast<int>(g));
      }
      std::vector<RedisReply> got;
      BulkDestination to_command;  // batch position -> the command's index
      if (destination) {
        to_command = [&](size_t position, size_t length) -> std::vector<std::span<uint8_t>> {
          if (reply_of[position] < 0) return {};
          return destination(group.second[static_cast<size_t>(reply_of[position])]->index, length);
        };
      }
      if (absl::Status s = (*connection)->Pipeline(batch, &got, to_command); !s.ok()) {
        Disconnect();
        return s;
      }
      for (size_t b = 0; b < got.size(); ++b) {
        if (reply_of[b] < 0) continue;
        const Pending& p = *group.second[static_cast<size_t>(reply_of[b])];
        RedisReply& reply = got[b];
        if (reply.kind == RedisReply::Kind::kError && cluster_ && round < kMaxRedirections) {
          if (std::optional<RedisAddress> moved = RedirectTarget(reply.str, "MOVED "); moved) {
            // The slot has a new owner: remember it for the commands that follow.
            const int slot = KeySlot(commands[p.index].args[1]);
            int16_t index = -1;
            for (size_t i = 0; i < nodes_.size(); ++i) {
              if (nodes_[i] == *moved) index = static_cast<int16_t>(i);
            }
            if (index < 0) {
              index = static_cast<int16_t>(nodes_.size());
              nodes_.push_back(*moved);
            }
            slot_owner_[static_cast<size_t>(slot)] = index;
            again.push_back({p.index, std::nullopt});
            continue;
          }
          if (std::optional<RedisAddress> ask = RedirectTarget(reply.str, "ASK "); ask) {
            again.push_back({p.index, ask});
            continue;
          }
        }
        (*replies)[p.index] = std::move(reply);
      }
    }
    pending = std::move(again);
  }
  return absl::OkStatus();
}

}  // namespace kvtier
