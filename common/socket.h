// RAII file descriptors and the few blocking TCP helpers rkv needs.
#ifndef RKV_COMMON_SOCKET_H_
#define RKV_COMMON_SOCKET_H_

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rkv {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
};
// Parses "host:port" (IPv4 dotted quad or "localhost"; port 0..65535).
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// The IPv4 socket address of host:port; a host that is not a dotted quad
// (or "localhost") is InvalidArgument.
absl::StatusOr<sockaddr_in> ToSockaddr(const HostPort& where);

// A listening TCP socket bound to host:port (port 0 picks a free one).
absl::StatusOr<Fd> ListenTcp(const HostPort& where, int backlog = 128);
// The port a bound socket ended up on.
absl::StatusOr<uint16_t> LocalPort(int fd);
// Connects with a deadline; the returned socket is blocking with TCP_NODELAY.
absl::StatusOr<Fd> ConnectTcp(const HostPort& where, absl::Duration timeout);

// Reads exactly n bytes. EOF before n bytes is Unavailable("connection
// closed"); a receive timeout (SO_RCVTIMEO) is DeadlineExceeded.
absl::Status ReadFull(int fd, void* buf, size_t n);
// Writes all n bytes (MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE).
absl::Status WriteFull(int fd, const void* buf, size_t n);
// Sets SO_RCVTIMEO; zero clears it.
absl::Status SetReceiveTimeout(int fd, absl::Duration timeout);

}  // namespace rkv

#endif  // RKV_COMMON_SOCKET_H_
