// Target side of the soft fabric over TCP: the virtual NIC. An acceptor
// thread takes connections and deals them out to a few event loops
// (soft_target_loop.h), which execute the requests.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fabric/soft/soft_target_loop.h"
#include "common/fabric/soft/soft_tcp.h"
#include "common/logging.h"
#include "common/socket.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

// More loops than this would only contend for the cores the application
// and the initiators need.
constexpr uint32_t kMaxDefaultThreads = 4;
constexpr uint32_t kMaxThreads = 256;

uint32_t DefaultThreads() {
  return std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, kMaxDefaultThreads);
}

class SoftTcpListener final : public Listener {
 public:
  SoftTcpListener(std::unique_ptr<SoftTargetContext> context, Fd listen_fd,
                  std::vector<std::unique_ptr<SoftTargetLoop>> loops)
      : context_(std::move(context)), listen_fd_(std::move(listen_fd)), loops_(std::move(loops)) {
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~SoftTcpListener() override {
    stopping_.store(true);
    ::shutdown(listen_fd_.get(), SHUT_RDWR);
    acceptor_.join();
    loops_.clear();  // Closes every connection.
  }

  Endpoint endpoint() const override { return {context_->address, context_->token}; }

  absl::Status Fence(uint64_t peer_id) override {
    if (peer_id == 0) return absl::InvalidArgumentError("Fence: 0 names no peer");
    // Refused from now on, then swept: see SoftTargetLoop::Fence.
    context_->fenced.Add(peer_id);
    for (const std::unique_ptr<SoftTargetLoop>& loop : loops_) loop->Fence(peer_id);
    RKV_LOG(INFO) << "soft fabric " << context_->address << ": fenced peer " << peer_id;
    return absl::OkStatus();
  }

  std::vector<uint64_t> TakeDeparted() override { return context_->departures.Take(); }

  ListenerCounters counters() const override {
    // A tally per loop: the loops never write a shared counter.
    ListenerCounters sum;
    for (const std::unique_ptr<SoftTargetLoop>& loop : loops_) sum += loop->counters();
    return sum;
  }

 private:
  void AcceptLoop();

  // The loops refer to it: it goes last.
  const std::unique_ptr<SoftTargetContext> context_;
  Fd listen_fd_;
  std::vector<std::unique_ptr<SoftTargetLoop>> loops_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
};

void SoftTcpListener::AcceptLoop() {
  size_t next = 0;
  while (!stopping_.load()) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      RKV_LOG(WARNING) << "soft fabric " << context_->address
                       << ": accept: " << std::strerror(errno);
      if (errno == EBADF || errno == EINVAL) return;
      absl::SleepFor(absl::Milliseconds(20));  // EMFILE and friends: back off, keep serving.
      continue;
    }
    // Responses go out as soon as a batch is done, as a NIC's would.
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // Round robin: queue pairs are spread over the loops, and each stays
    // on its loop, which keeps its requests in order.
    loops_[next]->Adopt(Fd(fd));
    next = (next + 1) % loops_.size();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> ListenSoftTcp(std::shared_ptr<const MemoryTable> table,
                                                        const ListenOptions& options,
                                                        absl::Duration busy_poll) {
  if (options.soft_threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("soft_threads is ", options.soft_threads, "; at most ", kMaxThreads));
  }
  const uint32_t threads = options.soft_threads == 0 ? DefaultThreads() : options.soft_threads;
  RKV_ASSIGN_OR_RETURN(HostPort where, ParseHostPort(options.address));
  RKV_ASSIGN_OR_RETURN(Fd fd, ListenTcp(where));
  RKV_ASSIGN_OR_RETURN(uint16_t port, LocalPort(fd.get()));
  auto context = std::make_unique<SoftTargetContext>();
  context->table = std::move(table);
  context->address = absl::StrCat(where.host, ":", port);
  context->token = options.token;
  context->busy_poll = busy_poll;
  std::vector<std::unique_ptr<SoftTargetLoop>> loops;
  for (uint32_t i = 0; i < threads; ++i) {
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<SoftTargetLoop> loop, SoftTargetLoop::Create(*context));
    loops.push_back(std::move(loop));
  }
  RKV_LOG(DEBUG) << "soft fabric listening on " << context->address << " with " << threads
                 << " loop(s)";
  return std::unique_ptr<Listener>(
      std::make_unique<SoftTcpListener>(std::move(context), std::move(fd), std::move(loops)));
}

}  // namespace rkv::fabric
