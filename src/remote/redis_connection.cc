// RedisConnection (redis_connection.h) over hiredis's blocking API.
#include "remote/redis_connection.h"

#include <hiredis/hiredis.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvtier {
namespace {

timeval ToTimeval(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  return tv;
}

RedisReply CopyReply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.kind = RedisReply::Kind::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.kind = RedisReply::Kind::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.kind = RedisReply::Kind::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.kind = RedisReply::Kind::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.kind = RedisReply::Kind::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(CopyReply(r->element[i]));
      break;
    default:
      out.kind = RedisReply::Kind::kNil;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Connect(const RedisAddress& address,
                                                                          std::chrono::milliseconds timeout) {
  redisContext* context = redisConnectWithTimeout(address.host.c_str(), address.port, ToTimeval(timeout));
  if (context == nullptr) return absl::UnavailableError(absl::StrCat("redis ", address.ToString(), ": out of memory"));
  if (context->err != 0) {
    absl::Status status = absl::UnavailableError(absl::StrCat("redis ", address.ToString(), ": ", context->errstr));
    redisFree(context);
    return status;
  }
  if (redisSetTimeout(context, ToTimeval(timeout)) != REDIS_OK) {
    redisFree(context);
    return absl::UnavailableError(absl::StrCat("redis ", address.ToString(), ": cannot set the socket timeout"));
  }
  return std::unique_ptr<RedisConnection>(new RedisConnection(address, context));
}

RedisConnection::~RedisConnection() { redisFree(context_); }

absl::Status RedisConnection::Fail(const char* what) {
  broken_ = true;
  const bool timed_out = context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
  const std::string message = absl::StrCat("redis ", address_.ToString(), ": ", what, ": ",
                                           timed_out ? "timed out" : context_->errstr);
  return timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
}

absl::Status RedisConnection::Pipeline(std::span<const RedisCommand* const> commands,
                                       std::vector<RedisReply>* replies) {
  if (broken_) return absl::UnavailableError(absl::StrCat("redis ", address_.ToString(), ": connection broken"));
  std::vector<const char*> argv;
  std::vector<size_t> argl;
  for (const RedisCommand* command : commands) {
    argv.clear();
    argl.clear();
    for (const std::string& arg : command->args) {
      argv.push_back(arg.data());
      argl.push_back(arg.size());
    }
    if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), argl.data()) != REDIS_OK) {
      return Fail("send");
    }
  }
  replies->clear();
  replies->reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) return Fail("reply");
    replies->push_back(CopyReply(static_cast<const redisReply*>(raw)));
    freeReplyObject(raw);
  }
  return absl::OkStatus();
}

}  // namespace kvtier
