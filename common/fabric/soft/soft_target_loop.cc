#include "common/fabric/soft/soft_target_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

constexpr int kMaxEvents = 128;
constexpr uint64_t kWakeId = 0;

}  // namespace

absl::StatusOr<std::unique_ptr<SoftTargetLoop>> SoftTargetLoop::Create(
    const SoftTargetContext& context) {
  Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return ErrnoToStatus(errno, "epoll_create1");
  Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return ErrnoToStatus(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return ErrnoToStatus(errno, "epoll_ctl");
  }
  return std::unique_ptr<SoftTargetLoop>(
      new SoftTargetLoop(context, std::move(epoll), std::move(wake)));
}

SoftTargetLoop::SoftTargetLoop(const SoftTargetContext& context, Fd epoll, Fd wake)
    : context_(context),
      epoll_(std::move(epoll)),
      wake_(std::move(wake)),
      thread_([this] { Run(); }) {}

SoftTargetLoop::~SoftTargetLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  Wake();
  thread_.join();
  // connections_ goes with the loop: each connection shuts its socket down.
}

void SoftTargetLoop::Wake() {
  const uint64_t one = 1;
  (void)::write(wake_.get(), &one, sizeof(one));
}

void SoftTargetLoop::Adopt(Fd fd) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // fd closes here.
    incoming_.push_back(std::move(fd));
  }
  Wake();
}

void SoftTargetLoop::Fence(uint64_t peer_id) {
  std::unique_lock<std::mutex> lock(mu_);
  // A loop that has stopped serves nobody: there is nothing to close.
  if (stopping_ || exited_) return;
  fences_.push_back(peer_id);
  const uint64_t ticket = ++fences_asked_;
  Wake();
  fenced_.wait(lock, [&] { return fences_done_ >= ticket || exited_; });
}

bool SoftTargetLoop::TakeIncoming() {
  uint64_t count;
  (void)::read(wake_.get(), &count, sizeof(count));
  std::vector<Fd> incoming;
  std::vector<uint64_t> fences;
  uint64_t fences_asked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    incoming.swap(incoming_);
    fences.swap(fences_);
    fences_asked = fences_asked_;
  }
  if (!fences.empty()) {
    // Between turns: no request of any connection is executing now.
    std::vector<uint64_t> doomed;
    for (const auto& [id, entry] : connections_) {
      const SoftTargetConnection& c = *entry.connection;
      if (c.established() && c.peer_id() != 0 &&
          std::find(fences.begin(), fences.end(), c.peer_id()) != fences.end()) {
        doomed.push_back(id);
      }
    }
    // Unsent responses go too: the initiator sees the connection end, as
    // when the target is lost.
    for (uint64_t id : doomed) Close(id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fences_done_ = fences_asked;
    }
    fenced_.notify_all();
  }
  const absl::Time deadline = MonotonicNow() + SoftTargetConnection::kHandshakeTimeout;
  for (Fd& fd : incoming) {
    const uint64_t id = next_id_++;
    auto connection = std::make_unique<SoftTargetConnection>(context_, served_, std::move(fd));
    // Edge-triggered: a connection reads until the socket is drained and
    // sends until it is full, so each event is news; registering once
    // spares an epoll_ctl per change of interest.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, connection->fd(), &ev) != 0) {
      RKV_LOG(WARNING) << "soft fabric " << context_.address
                       << ": epoll_ctl: " << std::strerror(errno);
      continue;  // The connection closes; its peer sees that.
    }
    // Served at once: the hello may already be here.
    connections_[id] = Entry{std::move(connection), true};
    ready_.push_back(id);
    handshakes_.emplace_back(deadline, id);
  }
  return true;
}

void SoftTargetLoop::Close(uint64_t id) {
  // Closing the socket also takes it out of the epoll set.
  connections_.erase(id);
}

int SoftTargetLoop::ExpireHandshakes() {
  if (handshakes_.empty()) return -1;
  const absl::Time now = MonotonicNow();
  while (!handshakes_.empty()) {
    const auto [deadline, id] = handshakes_.front();
    auto it = connections_.find(id);
    if (it == connections_.end() || it->second.connection->established()) {
      handshakes_.pop_front();
      continue;
    }
    if (deadline > now) {
      // Round up, so that the wake-up is not a millisecond early.
      return static_cast<int>(absl::ToInt64Milliseconds(deadline - now)) + 1;
    }
    RKV_LOG(WARNING) << "soft fabric " << context_.address
                     << ": closing a connection whose handshake did not finish in time";
    handshakes_.pop_front();
    Close(id);
  }
  return -1;
}

void SoftTargetLoop::Run() {
  RunLoop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_ = true;
  }
  fenced_.notify_all();  // A Fence waiting on a loop that ended waits no more.
}

void SoftTargetLoop::RunLoop() {
  epoll_event events[kMaxEvents];
  std::vector<uint64_t> serving;
  for (;;) {
    const int deadline_ms = ExpireHandshakes();
    int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, 0);
    if (n == 0 && ready_.empty()) {
      // Idle: spin a while (soft_busy_poll), then sleep until something
      // arrives or a handshake expires.
      const absl::Time until = MonotonicNow() + context_.busy_poll;
      while (n == 0 && MonotonicNow() < until)
        n = ::epoll_wait(epoll_.get(), events, kMaxEvents, 0);
      if (n == 0) n = ::epoll_wait(epoll_.get(), events, kMaxEvents, deadline_ms);
    }
    if (n < 0 && errno != EINTR) {
      RKV_LOG(ERROR) << "soft fabric " << context_.address
                     << ": epoll_wait: " << std::strerror(errno);
      return;  // Unreachable in practice (EBADF, EFAULT, EINVAL).
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        if (!TakeIncoming()) return;
        continue;
      }
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      it->second.connection->NoteEvents(events[i].events);
      if (!it->second.ready) {
        it->second.ready = true;
        ready_.push_back(id);
      }
    }
    // Each connection in turn; one that has more to read than a turn's
    // budget goes to the back for the next round.
    serving.swap(ready_);
    for (uint64_t id : serving) {
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      Entry& entry = it->second;
      entry.ready = false;
      switch (entry.connection->Service()) {
        case SoftTargetConnection::Progress::kIdle:
          break;
        case SoftTargetConnection::Progress::kMore:
          entry.ready = true;
          ready_.push_back(id);
          break;
        case SoftTargetConnection::Progress::kDone:
          Close(id);
          break;
      }
    }
    serving.clear();
  }
}

}  // namespace rkv::fabric
