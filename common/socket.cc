#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rkv {
namespace {

std::string Describe(const HostPort& where) { return absl::StrCat(where.host, ":", where.port); }

}  // namespace

absl::StatusOr<sockaddr_in> ToSockaddr(const HostPort& where) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(where.port);
  const std::string host = where.host == "localhost" ? "127.0.0.1" : where.host;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", where.host, "' is not an IPv4 address"));
  }
  return addr;
}

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address '", address, "' is not host:port"));
  }
  HostPort hp{std::string(address.substr(0, colon)), static_cast<uint16_t>(port)};
  RKV_RETURN_IF_ERROR(ToSockaddr(hp).status());
  return hp;
}

absl::StatusOr<Fd> ListenTcp(const HostPort& where, int backlog) {
  RKV_ASSIGN_OR_RETURN(sockaddr_in addr, ToSockaddr(where));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, "socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("bind ", Describe(where)));
  }
  if (::listen(fd.get(), backlog) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("listen ", Describe(where)));
  }
  return fd;
}

absl::StatusOr<uint16_t> LocalPort(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoToStatus(errno, "getsockname");
  }
  return ntohs(addr.sin_port);
}

absl::StatusOr<Fd> ConnectTcp(const HostPort& where, absl::Duration timeout) {
  RKV_ASSIGN_OR_RETURN(sockaddr_in addr, ToSockaddr(where));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, "socket");
  const std::string what = absl::StrCat("connect ", Describe(where));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) return ErrnoToStatus(errno, what);
    pollfd pfd{fd.get(), POLLOUT, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
    int rc;
    do {
      rc = ::poll(&pfd, 1, ms);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) return ErrnoToStatus(ETIMEDOUT, what);
    if (rc < 0) return ErrnoToStatus(errno, what);
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return ErrnoToStatus(err, what);
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

absl::Status ReadFull(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      return absl::UnavailableError("connection closed");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError("receive timed out");
    } else if (errno != EINTR) {
      return ErrnoToStatus(errno, "recv");
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r >= 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (errno != EINTR) {
      return ErrnoToStatus(errno, "send");
    }
  }
  return absl::OkStatus();
}

absl::Status SetReceiveTimeout(int fd, absl::Duration timeout) {
  timeval tv = absl::ToTimeval(timeout);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
    return ErrnoToStatus(errno, "setsockopt(SO_RCVTIMEO)");
  }
  return absl::OkStatus();
}

}  // namespace rkv
