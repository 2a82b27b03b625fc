// RedisConnection (redis_connection.h): hiredis connects; the RESP2 writer (sendmsg from
// the arguments in place) and reader (a buffer for the small parts, large bulk strings
// received straight into their destination) are here.
#include "remote/redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvtier {
namespace {

timeval ToTimeval(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  return tv;
}

// The read buffer: replies' small parts, and the start of large ones.
constexpr size_t kReadBufferBytes = 256 << 10;
// Arguments up to this size are copied into the framing; larger ones are sent in place.
constexpr size_t kInlineArgBytes = 4 << 10;
// Arrays nest at most this deep (CLUSTER SLOTS: 3); deeper is a protocol error.
constexpr int kMaxDepth = 8;
// Bulk strings and arrays larger than this are a protocol error (Redis's own limit: 512 MiB).
constexpr int64_t kMaxBulkBytes = 512ll << 20;
constexpr int64_t kMaxArrayElements = 1ll << 20;

}  // namespace

RedisConnection::RedisConnection(const RedisAddress& address, redisContext* context)
    : address_(address), context_(context), fd_(context->fd), buffer_(kReadBufferBytes) {}

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

absl::Status RedisConnection::Fail(absl::Status status) {
  broken_ = true;
  return status;
}

absl::Status RedisConnection::IoError(const char* what, int error) {
  const bool timed_out = error == EAGAIN || error == EWOULDBLOCK;
  const std::string message = absl::StrCat("redis ", address_.ToString(), ": ", what, ": ",
                                           timed_out ? "timed out" : error == 0 ? "connection closed" : strerror(error));
  return Fail(timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message));
}

absl::Status RedisConnection::SendAll(std::span<const RedisCommand* const> commands) {
  // The framing (and small arguments) in one string; large arguments sent where they are.
  struct Piece {
    const char* data;  // null: framing[offset, offset + size)
    size_t offset, size;
  };
  std::string framing;
  std::vector<Piece> pieces;
  size_t framed_from = 0;
  auto close_framing = [&] {
    if (framing.size() > framed_from) pieces.push_back({nullptr, framed_from, framing.size() - framed_from});
    framed_from = framing.size();
  };
  for (const RedisCommand* command : commands) {
    absl::StrAppend(&framing, "*", command->args.size(), "\r\n");
    for (const std::string& arg : command->args) {
      absl::StrAppend(&framing, "$", arg.size(), "\r\n");
      if (arg.size() <= kInlineArgBytes) {
        framing.append(arg);
      } else {
        close_framing();
        pieces.push_back({arg.data(), 0, arg.size()});
      }
      framing.append("\r\n");
    }
  }
  close_framing();
  std::vector<iovec> iov;
  iov.reserve(pieces.size());
  for (const Piece& p : pieces) {
    const char* data = p.data != nullptr ? p.data : framing.data() + p.offset;
    iov.push_back({const_cast<char*>(data), p.size});
  }
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    // MSG_NOSIGNAL: a peer that closed is an error here, never a SIGPIPE for the process.
    const ssize_t sent = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return IoError("send", errno);
    }
    size_t left = static_cast<size_t>(sent);
    while (left > 0 && first < iov.size()) {
      const size_t take = std::min(left, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      left -= take;
      if (iov[first].iov_len == 0) ++first;
    }
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
  }
  return absl::OkStatus();
}

absl::Status RedisConnection::Fill() {
  if (begin_ == end_) begin_ = end_ = 0;
  if (end_ == buffer_.size()) {  // compact: the unparsed part to the front
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);  // a line longer than the buffer
  for (;;) {
    const ssize_t got = recv(fd_, buffer_.data() + end_, buffer_.size() - end_, 0);
    if (got > 0) {
      end_ += static_cast<size_t>(got);
      return absl::OkStatus();
    }
    if (got < 0 && errno == EINTR) continue;
    return IoError("reply", got == 0 ? 0 : errno);
  }
}

absl::Status RedisConnection::ReadExact(uint8_t* out, size_t n) {
  const size_t buffered = std::min(n, end_ - begin_);
  if (buffered > 0) std::memcpy(out, buffer_.data() + begin_, buffered);
  begin_ += buffered;
  size_t done = buffered;
  while (done < n) {
    const ssize_t got = recv(fd_, out + done, n - done, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    return IoError("reply", got == 0 ? 0 : errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RedisConnection::ReadLine() {
  size_t scanned = begin_;
  for (;;) {
    const char* start = buffer_.data() + begin_;
    const char* found = static_cast<const char*>(memchr(buffer_.data() + scanned, '\n', end_ - scanned));
    if (found != nullptr) {
      if (found == start || found[-1] != '\r') return Fail(absl::UnavailableError(absl::StrCat("redis ", address_.ToString(), ": protocol error (bad line end)")));
      std::string line(start, static_cast<size_t>(found - 1 - start));
      begin_ = static_cast<size_t>(found + 1 - buffer_.data());
      return line;
    }
    const size_t offset = end_ - begin_;  // scanned so far, relative to begin_ (Fill may move it)
    if (absl::Status s = Fill(); !s.ok()) return s;
    scanned = begin_ + offset;
  }
}

absl::Status RedisConnection::ReadReply(RedisReply* reply, int depth, int64_t index,
                                        const BulkDestination& destination) {
  auto protocol_error = [&](absl::string_view what) {
    return Fail(absl::UnavailableError(absl::StrCat("redis ", address_.ToString(), ": protocol error (", what, ")")));
  };
  absl::StatusOr<std::string> line = ReadLine();
  if (!line.ok()) return line.status();
  if (line->empty()) return protocol_error("empty line");
  const char type = (*line)[0];
  const absl::string_view rest = absl::string_view(*line).substr(1);
  int64_t n = 0;
  switch (type) {
    case '+':
      reply->kind = RedisReply::Kind::kStatus;
      reply->str = std::string(rest);
      return absl::OkStatus();
    case '-':
      reply->kind = RedisReply::Kind::kError;
      reply->str = std::string(rest);
      return absl::OkStatus();
    case ':':
      if (!absl::SimpleAtoi(rest, &reply->integer)) return protocol_error("bad integer");
      reply->kind = RedisReply::Kind::kInteger;
      return absl::OkStatus();
    case '$': {
      if (!absl::SimpleAtoi(rest, &n) || n < -1 || n > kMaxBulkBytes) return protocol_error("bad bulk length");
      if (n == -1) {
        reply->kind = RedisReply::Kind::kNil;
        return absl::OkStatus();
      }
      reply->kind = RedisReply::Kind::kString;
      const size_t length = static_cast<size_t>(n);
      std::vector<std::span<uint8_t>> buffers;
      if (index >= 0 && destination) buffers = destination(static_cast<size_t>(index), length);
      size_t total = 0;
      for (const std::span<uint8_t>& b : buffers) total += b.size();
      if (!buffers.empty() && total == length) {
        for (const std::span<uint8_t>& b : buffers) {
          if (absl::Status s = ReadExact(b.data(), b.size()); !s.ok()) return s;
        }
        reply->in_destination = true;
      } else {
        reply->str.resize(length);
        if (absl::Status s = ReadExact(reinterpret_cast<uint8_t*>(reply->str.data()), length); !s.ok()) return s;
      }
      uint8_t crlf[2];
      if (absl::Status s = ReadExact(crlf, 2); !s.ok()) return s;
      if (crlf[0] != '\r' || crlf[1] != '\n') return protocol_error("bulk string not ended by CRLF");
      return absl::OkStatus();
    }
    case '*': {
      if (!absl::SimpleAtoi(rest, &n) || n < -1 || n > kMaxArrayElements) return protocol_error("bad array length");
      if (n == -1) {
        reply->kind = RedisReply::Kind::kNil;
        return absl::OkStatus();
      }
      if (depth >= kMaxDepth) return protocol_error("arrays nested too deep");
      reply->kind = RedisReply::Kind::kArray;
      reply->elements.resize(static_cast<size_t>(n));
      for (RedisReply& element : reply->elements) {
        if (absl::Status s = ReadReply(&element, depth + 1, -1, destination); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    default:
      return protocol_error(absl::StrCat("reply type '", std::string(1, type), "'"));
  }
}

absl::Status RedisConnection::Pipeline(std::span<const RedisCommand* const> commands,
                                       std::vector<RedisReply>* replies, const BulkDestination& destination) {
  if (broken_) return absl::UnavailableError(absl::StrCat("redis ", address_.ToString(), ": connection broken"));
  if (absl::Status s = SendAll(commands); !s.ok()) return s;
  replies->clear();
  replies->resize(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    if (absl::Status s = ReadReply(&(*replies)[i], 0, static_cast<int64_t>(i), destination); !s.ok()) return s;
  }
  if (begin_ != end_) return Fail(absl::UnavailableError(absl::StrCat("redis ", address_.ToString(), ": protocol error (bytes after the last reply)")));
  return absl::OkStatus();
}

}  // namespace kvtier
