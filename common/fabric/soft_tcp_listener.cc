// Target side of the soft fabric over TCP: the virtual NIC.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fabric/soft_tcp.h"
#include "common/fabric/soft_wire.h"
#include "common/logging.h"
#include "common/socket.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

// Flush responses once this much is buffered, even if more requests wait.
constexpr size_t kFlushBytes = 256 << 10;
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(5);

bool InputPending(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  return ::poll(&pfd, 1, 0) > 0;
}

bool TokensEqual(absl::string_view a, absl::string_view b) {
  // Length leaks, contents do not.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

class SoftTcpListener final : public Listener {
 public:
  SoftTcpListener(std::shared_ptr<const MemoryTable> table, Fd listen_fd, std::string address,
                  std::string token)
      : table_(std::move(table)),
        listen_fd_(std::move(listen_fd)),
        address_(std::move(address)),
        token_(std::move(token)) {
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~SoftTcpListener() override {
    stopping_.store(true);
    ::shutdown(listen_fd_.get(), SHUT_RDWR);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : connections_) ::shutdown(c->fd.get(), SHUT_RDWR);
    for (auto& c : connections_) c->thread.join();
  }

  Endpoint endpoint() const override { return {address_, token_}; }

 private:
  struct Connection {
    Fd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void AcceptLoop();
  void Serve(Connection* c);
  bool Handshake(int fd);
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const MemoryTable> table_;
  Fd listen_fd_;
  const std::string address_;
  const std::string token_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

void SoftTcpListener::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void SoftTcpListener::AcceptLoop() {
  while (!stopping_.load()) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      RKV_LOG(WARNING) << "soft fabric " << address_ << ": accept: " << std::strerror(errno);
      if (errno == EBADF || errno == EINVAL) return;
      absl::SleepFor(absl::Milliseconds(20));  // EMFILE and friends: back off, keep serving.
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    auto c = std::make_unique<Connection>();
    c->fd = Fd(fd);
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] {
      Serve(raw);
      // The peer learns at once; the descriptor is closed when reaped.
      ::shutdown(raw->fd.get(), SHUT_RDWR);
      raw->done.store(true);
    });
  }
}

bool SoftTcpListener::Handshake(int fd) {
  if (!SetReceiveTimeout(fd, kHandshakeTimeout).ok()) return false;
  std::string fixed(wire::kHelloFixedBytes, '\0');
  if (!ReadFull(fd, fixed.data(), fixed.size()).ok()) return false;
  wire::Hello hello;
  absl::StatusOr<size_t> token_len = wire::DecodeHelloFixed(fixed, &hello);
  if (!token_len.ok()) {
    RKV_LOG(WARNING) << "soft fabric " << address_ << ": rejected peer: " << token_len.status();
    return false;
  }
  hello.token.resize(*token_len);
  if (!ReadFull(fd, hello.token.data(), hello.token.size()).ok()) return false;
  wire::HelloStatus status = wire::HelloStatus::kOk;
  if (hello.version != wire::kVersion) {
    status = wire::HelloStatus::kBadVersion;
    RKV_LOG(WARNING) << "soft fabric " << address_ << ": rejected peer speaking version "
                     << hello.version;
  } else if (!token_.empty() && !TokensEqual(hello.token, token_)) {
    status = wire::HelloStatus::kBadToken;
    RKV_LOG(WARNING) << "soft fabric " << address_ << ": rejected peer with a wrong token";
  }
  const std::string reply = wire::EncodeHelloReply(status);
  if (!WriteFull(fd, reply.data(), reply.size()).ok()) return false;
  return status == wire::HelloStatus::kOk && SetReceiveTimeout(fd, absl::ZeroDuration()).ok();
}

void SoftTcpListener::Serve(Connection* c) {
  const int fd = c->fd.get();
  if (!Handshake(fd)) return;
  std::vector<uint8_t> out;
  std::vector<uint8_t> payload;
  for (;;) {
    char raw[wire::kRequestHeaderBytes];
    if (!ReadFull(fd, raw, sizeof(raw)).ok()) break;
    absl::StatusOr<wire::RequestHeader> h = wire::DecodeRequestHeader({raw, sizeof(raw)});
    if (!h.ok()) {
      RKV_LOG(WARNING) << "soft fabric " << address_ << ": closing connection: " << h.status();
      break;
    }
    const RemoteRequest& req = h->request;
    if (req.opcode == Opcode::kWrite) {
      payload.resize(req.length);
      if (!ReadFull(fd, payload.data(), payload.size()).ok()) break;
    }

    wire::ResponseHeader resp;
    const size_t at = out.size();
    out.resize(at + wire::kResponseHeaderBytes);
    switch (req.opcode) {
      case Opcode::kRead:
        out.resize(at + wire::kResponseHeaderBytes + req.length);
        resp.status = ExecuteRead(*table_, req, 0, req.length,
                                  out.data() + at + wire::kResponseHeaderBytes);
        if (resp.status == CompletionStatus::kSuccess) {
          resp.length = req.length;
        } else {
          out.resize(at + wire::kResponseHeaderBytes);
        }
        break;
      case Opcode::kWrite:
        resp.status = ExecuteWrite(*table_, req, 0, req.length, payload.data());
        break;
      case Opcode::kCas64:
      case Opcode::kFaa64:
        resp.status = ExecuteAtomic(*table_, req, &resp.value);
        break;
    }
    wire::EncodeResponseHeader(resp, out.data() + at);
    const bool failed = resp.status != CompletionStatus::kSuccess;
    if (failed || out.size() >= kFlushBytes || !InputPending(fd)) {
      if (!WriteFull(fd, out.data(), out.size()).ok()) break;
      out.clear();
    }
    // An error completion moves the responder to the error state: it
    // executes nothing more for this queue pair.
    if (failed) break;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> ListenSoftTcp(std::shared_ptr<const MemoryTable> table,
                                                        const ListenOptions& options) {
  RKV_ASSIGN_OR_RETURN(HostPort where, ParseHostPort(options.address));
  RKV_ASSIGN_OR_RETURN(Fd fd, ListenTcp(where));
  RKV_ASSIGN_OR_RETURN(uint16_t port, LocalPort(fd.get()));
  std::string address = absl::StrCat(where.host, ":", port);
  RKV_LOG(DEBUG) << "soft fabric listening on " << address;
  return std::unique_ptr<Listener>(std::make_unique<SoftTcpListener>(
      std::move(table), std::move(fd), std::move(address), options.token));
}

}  // namespace rkv::fabric
