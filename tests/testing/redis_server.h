// Test helper: runs Debian's redis-server (and redis-cli for a cluster) as child processes
// on free loopback ports, in a per-test temp directory, with persistence off — so tests
// never depend on a Redis someone else runs. SIGKILL and restart on the same port (the
// data is gone, as after a crash without persistence). Not thread-safe (test bodies).
#ifndef KVTIER_TESTS_TESTING_REDIS_SERVER_H_
#define KVTIER_TESTS_TESTING_REDIS_SERVER_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "remote/redis_client.h"

extern char** environ;

namespace kvtier::testing {

// The path of a program on PATH, "" when absent.
inline std::string FindProgram(const std::string& name) {
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  dirs += ":/usr/sbin:/usr/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start) == std::string::npos ? dirs.size() : dirs.find(':', start);
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Why Redis tests cannot run here ("" when they can).
inline std::string RedisMissingReason() {
  if (FindProgram("redis-server").empty()) {
    return "redis-server is not installed (scripts/install-deps.sh installs Debian's redis-server)";
  }
  if (FindProgram("redis-cli").empty()) return "redis-cli is not installed (Debian's redis-tools)";
  return "";
}

// A free loopback port (and, for cluster nodes, its bus port + 10000 free too).
inline int FreePort(bool with_bus = false) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    close(fd);
    if (port == 0 || (with_bus && port > 55000)) continue;
    if (!with_bus) return port;
    int bus = socket(AF_INET, SOCK_STREAM, 0);
    addr.sin_port = htons(static_cast<uint16_t>(port + 10000));
    const bool free = bind(bus, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(bus);
    if (free) return port;
  }
  return 0;
}

inline pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : 0;
}

// One redis-server on 127.0.0.1:port.
class RedisServer {
 public:
  // cluster: a cluster-enabled node (its slots are assigned by RedisCluster); extra_args:
  // more redis-server options (e.g. {"--io-threads", "2"}).
  explicit RedisServer(bool cluster = false, std::vector<std::string> extra_args = {})
      : cluster_(cluster), extra_args_(std::move(extra_args)), port_(FreePort(cluster)) {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("kvtier-redis-", getpid(), "-", port_);
    std::filesystem::create_directories(dir_);
    Start();
  }
  ~RedisServer() {
    Kill();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return absl::StrCat("redis://127.0.0.1:", port_); }
  bool running() const { return pid_ != 0; }

  // Starts it (again) and waits until it answers; false when it did not within 10 s.
  bool Start() {
    std::vector<std::string> args = {FindProgram("redis-server"), "--port", std::to_string(port_), "--bind",
                                     "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir_.string(),
                                     "--protected-mode", "no"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    if (cluster_) {
      args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file",
                               (dir_ / absl::StrCat("nodes-", port_, ".conf")).string()});
      std::error_code ignored;
      std::filesystem::remove(dir_ / absl::StrCat("nodes-", port_, ".conf"), ignored);
    }
    pid_ = Spawn(args);
    if (pid_ == 0) return false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Command({"PING"}).str == "PONG") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // SIGKILL, and waits for it to be gone (its data with it).
  void Kill() {
    if (pid_ == 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
  }

  // Runs one command on this node (no routing); the reply, or a kError reply with why.
  RedisReply Command(std::vector<std::string> args) const {
    auto error = [](absl::string_view why) {
      RedisReply reply;
      reply.kind = RedisReply::Kind::kError;
      reply.str = std::string(why);
      return reply;
    };
    auto connection = RedisConnection::Connect({"127.0.0.1", port_}, std::chrono::milliseconds(2000));
    if (!connection.ok()) return error(connection.status().message());
    RedisCommand command{std::move(args)};
    const RedisCommand* one = &command;
    std::vector<RedisReply> replies;
    absl::Status s = (*connection)->Pipeline(std::span<const RedisCommand* const>(&one, 1), &replies);
    if (!s.ok()) return error(s.message());
    return replies[0];
  }

 private:
  const bool cluster_;
  const std::vector<std::string> extra_args_;
  const int port_;
  std::filesystem::path dir_;
  pid_t pid_ = 0;
};

// Three cluster nodes on loopback ports, slots assigned by `redis-cli --cluster create`.
class RedisCluster {
 public:
  RedisCluster() {
    for (int i = 0; i < 3; ++i) nodes_.push_back(std::make_unique<RedisServer>(/*cluster=*/true));
    std::vector<std::string> args = {FindProgram("redis-cli"), "--cluster", "create"};
    for (const auto& node : nodes_) args.push_back(absl::StrCat("127.0.0.1:", node->port()));
    args.insert(args.end(), {"--cluster-replicas", "0", "--cluster-yes"});
    const pid_t pid = Spawn(args);
    int status = 0;
    if (pid == 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return;
    // Every node sees the whole cluster before the tests use it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      bool ok = true;
      for (const auto& node : nodes_) {
        ok = ok && node->Command({"CLUSTER", "INFO"}).str.find("cluster_state:ok") != std::string::npos;
      }
      if (ok) {
        ready_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  bool ready() const { return ready_; }
  RedisServer& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  // The seed list of every node.
  std::string url() const {
    std::string url = "redis://";
    for (size_t i = 0; i < nodes_.size(); ++i) absl::StrAppend(&url, i > 0 ? "," : "", "127.0.0.1:", nodes_[i]->port());
    return url;
  }

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  bool ready_ = false;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_REDIS_SERVER_H_
